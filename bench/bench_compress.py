"""Compression on CPU: quantize/prune time, bits per byte and size of every method, and CPU inference
tokens/s of the same model in fp32, bf16, int8 (weight-only and dynamic) and int4, measured in one run.

    python bench/bench_compress.py [--run RUN_DIR] [--steps 300] [--threads 1]

Without --run it first trains the tiny config (dim 64) on tiny-shakespeare byte shards with torchrun
(2 processes). Speed is a forward pass over one 64-token sequence on --threads threads, best of
--repeats (the least disturbed by other work on a shared machine). GPTQModel and llmcompressor are the
peers the issue names; the script tries to import them and prints why it cannot compare when absent
(neither is in requirements.lock; both target CUDA for GPTQ kernels).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "reference" / "books" / "tiny-shakespeare.txt"


def train(out: Path, steps: int) -> Path:
    from llmpipe.train.byte_shards import write_byte_shards

    shards = write_byte_shards(TEXT, out / "shards")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
           str(ROOT / "train/pretrain.py"), "--data", str(shards), "--config", str(ROOT / "configs/train/tiny.yaml"),
           "--out", str(out / "run"), f"--train.steps={steps}", "--train.val_every=0", "--metrics.tensorboard=false"]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    return out / "run"


def speed(model: object, seq_len: int, vocab: int, repeats: int, dtype: object = None) -> float:
    import torch

    ids = torch.randint(0, vocab, (1, seq_len), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    with torch.inference_mode():
        for i in range(repeats + 2):
            t0 = time.perf_counter()
            if dtype is not None:
                with torch.autocast("cpu", dtype=dtype):  # type: ignore[arg-type]
                    model(ids)  # type: ignore[operator]
            else:
                model(ids)  # type: ignore[operator]
            if i >= 2:
                best = min(best, time.perf_counter() - t0)
    return seq_len / best


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--run", type=Path, default=None)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    import torch
    from llmpipe.compress.bpb import bits_per_byte
    from llmpipe.compress.calib import calibration_tokens
    from llmpipe.compress.model_io import load_model
    from llmpipe.compress.prune import prune_weights
    from llmpipe.compress.quantize import quantize_model
    from llmpipe.compress.report import fp32_file_bytes
    from llmpipe.compress.spec import QuantSpec
    from llmpipe.compress.store import save_quantized

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="bench-compress-"))
    run = args.run or train(tmp, args.steps)
    base = load_model(run)
    cfg = base.model.cfg
    shards = base.shards
    calib = calibration_tokens(shards, 32)
    fp32_size = fp32_file_bytes(base.model)
    rows = []
    fp32_bpb = bits_per_byte(base.model, shards, max_rows=128)
    tps = speed(base.model, cfg.max_seq_len, cfg.vocab_size, args.repeats)
    rows.append({"variant": "fp32", "seconds": 0.0, "bpb": fp32_bpb, "size_ratio": 1.0, "tokens_per_s": tps})
    bf16 = copy.deepcopy(base.model).to(torch.bfloat16)
    rows.append({"variant": "bf16 weights", "seconds": 0.0, "bpb": bits_per_byte(bf16, shards, max_rows=128),
                 "size_ratio": 0.5, "tokens_per_s": speed(bf16, cfg.max_seq_len, cfg.vocab_size, args.repeats)})  # fmt: skip
    for method in ("int8", "int8-dynamic", "int4", "nf4", "gptq-int4"):
        model = copy.deepcopy(base.model)
        spec = QuantSpec(method)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        quantize_model(model, spec, calib if method == "gptq-int4" else None)
        took = time.perf_counter() - t0
        from llmpipe.compress.model_io import hf_config_of

        f = save_quantized(model, spec, tmp / method, hf_config_of(model, base), base.tokenizer)
        rows.append({"variant": method, "seconds": took, "bpb": bits_per_byte(model, shards, max_rows=128),
                     "size_ratio": f.stat().st_size / fp32_size,
                     "tokens_per_s": speed(model, cfg.max_seq_len, cfg.vocab_size, args.repeats)})  # fmt: skip
    for method, structure in (("magnitude", "unstructured"), ("wanda", "unstructured"), ("wanda", "2:4")):
        model = copy.deepcopy(base.model)
        t0 = time.perf_counter()
        prune_weights(model, method, 0.5, structure, calib)
        rows.append({"variant": f"prune {method} {structure} 50%", "seconds": time.perf_counter() - t0,
                     "bpb": bits_per_byte(model, shards, max_rows=128), "size_ratio": 1.0, "tokens_per_s": None})  # fmt: skip
    peers = {}
    for peer in ("gptqmodel", "llmcompressor"):
        peers[peer] = (
            "importable" if importlib.util.find_spec(peer) else "not installed (see docs/benchmarks.md)"
        )
    print(json.dumps({"model": {"dim": cfg.dim, "layers": cfg.n_layers, "hidden": cfg.hidden}, "rows": rows,
                      "peers": peers, "threads": args.threads}, indent=1))  # fmt: skip
    print("| variant | time s | bits/byte | vs fp32 | size vs fp32 | CPU tokens/s | vs fp32 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        t = r["tokens_per_s"]
        speed_cells = f"{t:.0f} | {t / tps:.2f}x" if t else "- | -"
        print(f"| {r['variant']} | {r['seconds']:.2f} | {r['bpb']:.4f} | {r['bpb'] / fp32_bpb - 1:+.2%} | "
              f"{r['size_ratio']:.3f} | {speed_cells} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
