#!/usr/bin/env bash
# The trainer's GPU checks in one run, for a machine with an NVIDIA GPU and a CUDA build of torch:
#   1. the CUDA tests (tests/train/test_cuda.py): bf16 and fp32 on the GPU against fp32 on the CPU,
#      resume from a DCP checkpoint, FlexAttention vs dense document masks, float8;
#   2. bench/bench_gpu.py on llama-1b (with a torch profiler table and trace of the compiled step) and
#      gpt2-124m: tokens/s, MFU and peak memory with and without document masking, compile and float8.
#
#   bash bench/gpu_check.sh [OUT_DIR] [SECONDS]     # default: gpu-check/ and 560 s for everything
#
# Narrower runs: TESTS_K (pytest -k), LLAMA_VARIANTS, GPT2_VARIANTS, GPT2_BATCH (0: the config's) and
# PROFILE_VARIANT (bench_gpu.py --variants / --profile-variant keys).
#
# Each part has its own time limit inside the overall one, and a part that fails does not stop the
# others; everything printed goes to OUT_DIR/gpu_check.log, the profile beside it. The package is taken
# from python/ of this checkout (PYTHONPATH), so it runs on a machine where only torch is installed; set
# PYTHON to the interpreter that has torch (default: python3). Reads tiny-shakespeare.txt from the data
# directory the suite uses (../shared/data).
set -u
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-gpu-check}}
BUDGET=${2:-560}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
: >"$LOG"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
END=$((SECONDS + BUDGET))

part() {  # part NAME SECONDS COMMAND...: runs COMMAND for at most SECONDS (and within the overall budget)
  local name=$1 limit=$2 left=$((END - SECONDS))
  shift 2
  ((limit > left)) && limit=$left
  if ((limit < 10)); then
    echo "== $name: skipped, the time budget is spent" | tee -a "$LOG"
    return
  fi
  echo "== $name (limit ${limit}s) $(date -u +%H:%M:%S)" | tee -a "$LOG"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$LOG"
  echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0))s" | tee -a "$LOG"
}

part environment 40 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; \
  $PY -c 'import torch, llmpipe.train.trainer; print(\"torch\", torch.__version__, torch.version.cuda, \
  torch.cuda.get_device_name(), torch.cuda.get_device_capability())'; \
  $PY -c 'import torchao; print(\"torchao\", torchao.__version__)'"
part cuda-tests 300 "$PY" -m pytest -q -s -p no:cacheprovider --timeout=280 tests/train/test_cuda.py \
  -k "${TESTS_K:-}"
part bench-llama-1b 180 "$PY" bench/bench_gpu.py --config configs/train/llama-1b.yaml --steps 10 --warmup 3 \
  --variants "${LLAMA_VARIANTS:-causal,causal+compile,causal+compile-ac,flex+compile-ac,causal+compile+float8-ac,causal+compile+fusedce-ac}" \
  --profile "$OUT_DIR" --profile-variant "${PROFILE_VARIANT:-causal+compile-ac}"
part bench-gpt2-124m 120 "$PY" bench/bench_gpu.py --config configs/train/gpt2-124m.yaml --steps 10 --warmup 3 \
  --batch-size "${GPT2_BATCH:-0}" --variants "${GPT2_VARIANTS:-causal,causal+compile,flex+compile,causal+compile+float8}"
echo "== done in ${SECONDS}s" | tee -a "$LOG"
grep -E '^\| |"check"|passed|failed|== ' "$LOG" | grep -v '^\|--' | tail -40
