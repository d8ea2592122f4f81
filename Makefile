# llmpipe: one target each for setup, demo, lint, test and bench.
# Everything runs inside $(VENV), created and filled from requirements.lock by `make setup`.
# CI (.ci/run) runs `make lint`, `make test` and `make test-wheel` on a fresh machine.
VENV      ?= .venv
PY        := $(VENV)/bin/python
UV        := $(VENV)/bin/uv
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
DEMO_OUT  ?= out/demo
# the compiled extension, built in place by `maturin develop` (stubtest checks the stub against it)
CORE      := python/llmpipe/_core.abi3.so

.PHONY: setup deps build system-deps demo test test-rust test-python test-wheel lint lint-python lint-rust lint-tree stubtest bench clean

setup: build

$(PY):
	python3 -m venv $(VENV)

$(VENV)/.deps-installed: requirements.lock | $(PY)
	@echo "setup: installing the locked Python dependencies into $(VENV) (a few minutes the first time)"
	$(PY) -m pip install -q uv==0.13.9
	$(UV) pip install --compile-bytecode --python $(PY) -r requirements.lock
	touch $@

deps: $(VENV)/.deps-installed

# cargo prints each crate as it compiles (~8 minutes on 2 cores the first time, seconds after)
build: deps
	@echo "setup: building the Rust extension (release)"
	maturin develop --release --uv
	$(PY) -m compileall -q python/llmpipe

demo: build
	llmpipe curate examples/raw --out $(DEMO_OUT)/shards --config configs/curate/sample.yaml
	llmpipe inspect $(DEMO_OUT)/shards --verify
	torchrun --standalone --nproc_per_node=2 train/pretrain.py --data $(DEMO_OUT)/shards \
	  --config configs/train/tiny.yaml --out $(DEMO_OUT)/run

# chromium, sshd, ssh and rsync for the report and cluster-launcher tests: installed when missing
# (root or passwordless sudo), else one line saying what to install (tools/system-deps.sh)
system-deps:
	@tools/system-deps.sh

test: system-deps build test-rust test-python

test-rust:
	cargo test --workspace --exclude llmpipe-py

# two processes, a test file each at a time (module fixtures are built once; the modules that start Ray
# clusters run one after another: tests/conftest.py): half the suite's time is spent waiting on the
# subprocesses it starts. PYTEST_WORKERS=0 runs it serially.
PYTEST_WORKERS ?= 2
test-python:
	pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

# the built wheel installed into fresh environments outside the checkout (core alone, then [all]),
# every command run from there (tools/wheel-check.sh)
test-wheel: deps
	tools/wheel-check.sh

lint: lint-python lint-rust stubtest lint-tree

lint-python: deps
	ruff check python train tests bench tools
	ruff format --check python train tests bench tools
	mypy
	$(PY) tools/check_deps.py

# no merge-conflict marker in any tracked file
lint-tree:
	@! git grep -nE '^(<<<<<<<|>>>>>>>)( |$$)|^=======$$' -- . || { echo "merge-conflict markers (above) are committed"; exit 1; }

# the workspace's crates only: vendor/whatlang is vendored code, outside the workspace (Cargo.toml)
lint-rust:
	cargo fmt --check
	cargo clippy --workspace --all-targets -- -D warnings

# the hand-written stub python/llmpipe/_core.pyi against the compiled module; the allowlist holds
# only pyo3/CPython artefacts. Builds the extension if it is not there (after changing Rust: make build).
stubtest: deps | $(CORE)
	cd python && $(abspath $(PY)) -m mypy.stubtest llmpipe._core --allowlist ../.ci/stubtest-allowlist

$(CORE): | deps
	maturin develop --release --uv -q
	$(PY) -m compileall -q python/llmpipe

bench: build
	$(PY) bench/run_all.py

clean:
	rm -rf target $(VENV) out
