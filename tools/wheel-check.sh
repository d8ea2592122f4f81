#!/usr/bin/env bash
# What a user gets from `pip install llmpipe`: build the wheel and the sdist, install the wheel into fresh
# virtual environments in a temporary directory outside the checkout, and run the commands from there.
#   1. the core alone (no extras): every subcommand's --help, curate the bundled sample, inspect,
#      report, tokenizer, plan; a command that needs an extra says which, in one line.
#   2. with [all]: train with `torchrun -m llmpipe.train` (2 processes), export, eval, quantize, prune,
#      plan --config by packaged name, the checkout's train/export_hf.py over the installed package.
# Versions come from requirements.lock (as constraints), so the check installs what CI tested.
# Usage: tools/wheel-check.sh   (make test-wheel; CI runs it after the tests)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
uv=${UV:-$repo/.venv/bin/uv}
maturin=${MATURIN:-$repo/.venv/bin/maturin}
work=$(mktemp -d /tmp/llmpipe-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
step() { printf "== wheel-check [%s]: %s\n" "$(date +%T)" "$*"; }

step "build the wheel and the sdist"
"$maturin" build --release -q -o "$work/dist" 2>/dev/null
"$maturin" sdist -o "$work/dist" >/dev/null
wheel=$(ls "$work"/dist/llmpipe-*.whl)
sdist=$(ls "$work"/dist/llmpipe-*.tar.gz)
for f in llmpipe/train/pretrain.py llmpipe/train/__main__.py llmpipe/configs/train/tiny.yaml \
         llmpipe/configs/curate/sample.yaml llmpipe/_core.abi3.so llmpipe/py.typed; do
  python3 -c "import sys, zipfile; sys.exit(0 if sys.argv[2] in zipfile.ZipFile(sys.argv[1]).namelist() else 1)" \
    "$wheel" "$f" || { echo "wheel-check: the wheel lacks $f"; exit 1; }
done
listing=$(tar -tzf "$sdist")
grep -q "python/llmpipe/configs/train/tiny.yaml" <<<"$listing" || { echo "wheel-check: the sdist lacks the configs"; exit 1; }

# a venv with the wheel and the given extras; no path of the checkout in it
make_venv() {
  python3 -m venv "$1"
  "$uv" pip install -q --compile-bytecode --python "$1/bin/python" -c "$repo/requirements.lock" "$wheel$2"
  if "$1/bin/python" -c "import llmpipe, sys; sys.exit(0 if llmpipe.__file__.startswith('$repo') else 1)"; then
    echo "wheel-check: llmpipe imports from the checkout, not the wheel"; exit 1
  fi
}

cd "$work"  # never the checkout: what works here works from any directory
step "core install (no extras)"
make_venv "$work/core" ""
core=$work/core/bin
"$core/llmpipe" --help >/dev/null
cmds=$("$core/python" -c "from llmpipe.cli import COMMANDS; print(' '.join(c.__name__.rsplit('.', 1)[1] for c in COMMANDS))")
for c in $cmds; do "$core/llmpipe" "$c" --help >/dev/null || { echo "wheel-check: llmpipe $c --help failed"; exit 1; }; done
"$core/llmpipe" curate "$repo/examples/raw" --out core-shards --config sample --workers 2
"$core/llmpipe" inspect core-shards --verify >/dev/null
"$core/llmpipe" report core-shards >/dev/null
echo "the quick brown fox" | "$core/llmpipe" tokenizer encode --tokenizer core-shards/tokenizer.json >/dev/null
"$core/llmpipe" plan --params 124M >/dev/null
set +e
msg=$("$core/llmpipe" export nowhere --out hf 2>&1); rc=$?
set -e
if [ "$rc" != 2 ] || [ "$(printf '%s\n' "$msg" | wc -l)" != 1 ] || ! grep -q "pip install 'llmpipe\[train\]'" <<<"$msg"; then
  echo "wheel-check: without the train extra, export should say so in one line (exit 2); got ($rc): $msg"; exit 1
fi

step "full install ([all])"
make_venv "$work/all" "[all]"
all=$work/all/bin
export OMP_NUM_THREADS=1
"$all/llmpipe" curate "$repo/examples/raw" --out shards --config configs/curate/sample.yaml --workers 2
"$all/torchrun" --standalone --nproc_per_node=2 -m llmpipe.train --data shards --config tiny --out run \
  --train.steps=20 --train.val_every=10 --checkpoint.every=10 >train.log 2>&1 || { tail -20 train.log; exit 1; }
"$all/llmpipe" export run --out hf
"$all/llmpipe" eval run --text "$repo/examples/raw/notes/field-notes.txt" >/dev/null
"$all/llmpipe" quantize run --method int8 --out q8 >/dev/null
"$all/llmpipe" quantize run --method q4_0 --format gguf --out gguf-q4 >/dev/null
# what docs/serving.md loads them with: transformers, from the extras alone
"$all/python" - <<'PY'
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

for kw in ({}, {"gguf_file": "model.gguf"}):
    d = "gguf-q4" if kw else "q8"
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, **kw)
    ids = AutoTokenizer.from_pretrained(d, **kw)("The", add_special_tokens=False, return_tensors="pt").input_ids
    assert model.generate(ids, max_new_tokens=3, do_sample=False).shape[1] > ids.shape[1], d
PY
"$all/lm_eval" --help >/dev/null  # the harness extra's entry point
"$all/llmpipe" prune run --sparsity 0.5 --out p50 >/dev/null
"$all/llmpipe" plan --config tiny --seq-len 64 --micro-batch 8 >/dev/null
"$all/python" "$repo/train/export_hf.py" run --out hf2 >/dev/null  # the checkout's script over the wheel
step "ok: the wheel runs every command from $work"
