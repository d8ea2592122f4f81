# llmpipe: one target each for setup, demo, lint, test and bench.
# Everything runs inside $(VENV), created and filled from requirements.lock by `make setup`.
VENV      ?= .venv
PY        := $(VENV)/bin/python
UV        := $(VENV)/bin/uv
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
DEMO_OUT  ?= out/demo

.PHONY: setup deps build demo test test-rust test-python lint bench clean

setup: build

$(PY):
	python3 -m venv $(VENV)

$(VENV)/.deps-installed: requirements.lock | $(PY)
	$(PY) -m pip install -q uv==0.13.9
	$(UV) pip install -q --python $(PY) -r requirements.lock
	touch $@

deps: $(VENV)/.deps-installed

build: deps
	maturin develop --release --uv -q

demo: build
	llmpipe curate examples/raw --out $(DEMO_OUT)/shards --config configs/curate/sample.yaml
	llmpipe inspect $(DEMO_OUT)/shards --verify
	torchrun --standalone --nproc_per_node=2 train/pretrain.py --data $(DEMO_OUT)/shards \
	  --config configs/train/tiny.yaml --out $(DEMO_OUT)/run

test: build test-rust test-python

test-rust:
	cargo test --workspace --exclude llmpipe-py

test-python:
	pytest -q

lint: deps
	ruff check python train tests bench
	ruff format --check python train tests bench
	mypy
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

bench: build
	$(PY) bench/run_all.py

clean:
	rm -rf target $(VENV) out
