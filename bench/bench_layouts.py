"""Parallel layouts on CPU: tokens/s of train/pretrain.py at tp, pp (each schedule) and dp x tp against
FSDP (``sharding: full``) on the same model, the same processes, the same global batch and the same
data, measured in the same run. Prints each layout's ratio to FSDP.

    python bench/bench_layouts.py [--quick] [--nproc 2] [--data SHARDS]

On a CPU box with gloo this measures the cost of each layout's communication and scheduling, not its
benefit: tensor and pipeline parallelism pay off when a model does not fit one device or when NVLink
makes their collectives cheap, neither of which holds here. Each layout runs in its own torchrun, the
first half of the steps is warm-up, the layouts alternate over --repeats runs, and the best step (the
least disturbed by other work on a shared machine) and the median are printed. fp32, 1 thread each.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "reference" / "books" / "tiny-shakespeare.txt"
MODEL = {"dim": 256, "n_layers": 4, "n_heads": 8}
SEQ_LEN, GLOBAL_BATCH = 128, 8

LAYOUTS: dict[int, dict[str, list[str]]] = {
    2: {
        "fsdp dp2": [],
        "tp2": ["--parallel.tp=2"],
        "tp2 loss-parallel": ["--parallel.tp=2", "--parallel.loss_parallel=true"],
        "pp2 gpipe": ["--parallel.pp=2", "--parallel.pp_schedule=gpipe", "--parallel.pp_microbatches=4"],
        "pp2 1f1b": ["--parallel.pp=2", "--parallel.pp_schedule=1f1b", "--parallel.pp_microbatches=4"],
        "pp2 interleaved": [
            "--parallel.pp=2",
            "--parallel.pp_schedule=interleaved_1f1b",
            "--parallel.pp_microbatches=4",
        ],
    },
    4: {
        "fsdp dp4": [],
        "dp2 x tp2": ["--parallel.tp=2"],
        "dp2 x pp2": ["--parallel.pp=2", "--parallel.pp_microbatches=4"],
        "pp2 x tp2": ["--parallel.pp=2", "--parallel.tp=2", "--parallel.pp_microbatches=4"],
    },
}


def dp_of(nproc: int, extra: list[str]) -> int:
    tp = pp = 1
    for a in extra:
        if a.startswith("--parallel.tp="):
            tp = int(a.split("=")[1])
        if a.startswith("--parallel.pp="):
            pp = int(a.split("=")[1])
    return nproc // (tp * pp)


def run(data: Path, steps: int, nproc: int, extra: list[str], out: Path, env: dict[str, str]) -> list[float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
        f"--master_port={port}", str(ROOT / "train/pretrain.py"), "--data", str(data), "--out", str(out),
        *(f"--model.{k}={v}" for k, v in MODEL.items()), f"--data.batch_size={GLOBAL_BATCH // dp_of(nproc, extra)}",
        f"--train.steps={steps}", "--train.log_every=1", "--train.val_every=0",
        "--parallel.mixed_precision=fp32", "--metrics.tensorboard=false", "--optim.warmup_steps=10",
        "--model.doc_mask=false", "--checkpoint.every=0", *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{extra} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["tokens_per_s"] for r in recs if "tokens_per_s" in r and r["step"] > steps // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps, one run per layout")
    ap.add_argument("--nproc", type=int, choices=sorted(LAYOUTS), default=2)
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default 30, quick 12)")
    ap.add_argument("--repeats", type=int, default=0, help="alternating runs per layout (default 2, quick 1)")
    ap.add_argument("--data", type=Path, default=None, help=f"shards with seq_len {SEQ_LEN}")
    args = ap.parse_args()
    steps = args.steps or (12 if args.quick else 30)
    repeats = args.repeats or (1 if args.quick else 2)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
    }
    layouts = LAYOUTS[args.nproc]
    results: dict[str, list[float]] = {name: [] for name in layouts}
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            from llmpipe.train.byte_shards import write_byte_shards

            data = write_byte_shards(TEXT, Path(tmp) / "shards", seq_len=SEQ_LEN)
        for i in range(repeats):
            for j, (name, extra) in enumerate(layouts.items()):
                results[name] += run(data, steps, args.nproc, extra, Path(tmp) / f"r{i}-{j}", env)
    print(f"model {MODEL}, global batch {GLOBAL_BATCH} x {SEQ_LEN} tokens, {args.nproc} gloo processes x 1 "
          f"thread, fp32, CPU, {steps} steps ({steps - steps // 2} timed) x {repeats} run(s) per layout")  # fmt: skip
    base_name = next(iter(layouts))
    base_best, base_med = max(results[base_name]), statistics.median(results[base_name])
    print(f"{'layout':20s} {'best tok/s':>10s} {'median':>10s}  vs {base_name} (best | median)")
    for name, vals in results.items():
        best, med = max(vals), statistics.median(vals)
        print(f"{name:20s} {best:10.0f} {med:10.0f}  {best / base_best:6.2f}x | {med / base_med:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
