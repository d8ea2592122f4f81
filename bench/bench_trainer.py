"""Trainer overhead on CPU: tokens/s of train/pretrain.py (under torchrun, FSDP2, loader, guard, metrics,
async checkpoints off the hot path) against a bare single-process PyTorch loop of the same model, the
same batch shape and the same data, measured in the same run with the same threads. Prints the ratio.

    python bench/bench_trainer.py [--quick] [--threads 2] [--data SHARDS]

Both sides run fp32 so that the compute is identical (bf16 on CPU varies with the kernel library);
each runs in its own fresh process, the first half of the steps is warm-up, the sides alternate over
--repeats runs, and each step is timed on its own: the best step is the least disturbed by other work
on a shared machine (the median is printed too). Tokens per CPU-second (process
CPU time, all threads, the loader's included) is steadier than wall time when other work competes.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "reference" / "books" / "tiny-shakespeare.txt"
MODEL = {"dim": 256, "n_layers": 4, "n_heads": 8}
SEQ_LEN, BATCH = 256, 8


def bare(data: Path, steps: int) -> dict[str, list[float]]:
    """The reference: model, AdamW, clipping, a random batch per step; nothing else."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from llmpipe.data import ShardDataset
    from llmpipe.train.model import ModelConfig, Transformer

    ds = ShardDataset(data, "train", verify="none")
    cfg = ModelConfig(**MODEL, vocab_size=ds.vocab_size, max_seq_len=ds.seq_len)  # type: ignore[arg-type]
    torch.manual_seed(0)
    model = Transformer(cfg)
    model.init_weights(seed=0)  # the trainer's default seed: the same initial weights
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(0)
    wall, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        rows, _ = ds.gather(rng.integers(0, len(ds), BATCH))
        x, y = torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:].copy())
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss)  # the trainer reads its loss every step too (for the spike guard)
        wall.append(BATCH * SEQ_LEN / (time.perf_counter() - t0))
        cpu.append(BATCH * SEQ_LEN / (time.process_time() - c0))
    warm = steps // 2
    return {"tokens_per_s": wall[warm:], "tokens_per_cpu_s": cpu[warm:]}


def trainer(data: Path, steps: int, nproc: int, out: Path, env: dict[str, str]) -> dict[str, list[float]]:
    warm = steps // 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
        f"--master_port={port}", str(ROOT / "train/pretrain.py"), "--data", str(data), "--out", str(out),
        *(f"--model.{k}={v}" for k, v in MODEL.items()), f"--data.batch_size={BATCH // nproc}",
        f"--train.steps={steps}", "--train.log_every=1", "--train.val_every=0",
        "--parallel.mixed_precision=fp32", "--metrics.tensorboard=false", "--optim.warmup_steps=10",
        "--model.doc_mask=false", "--checkpoint.every=0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in recs if "tokens_per_s" in r and r["step"] > warm]
    assert len(timed) == steps - warm, timed
    return {k: [r[k] for r in timed] for k in ("tokens_per_s", "tokens_per_cpu_s")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads for both sides")
    ap.add_argument("--steps", type=int, default=0, help="steps per side (default 60, quick 20)")
    ap.add_argument(
        "--data", type=Path, default=None, help="shards with seq_len 256 (default: bytes of text)"
    )
    ap.add_argument("--repeats", type=int, default=0, help="alternating runs per side (default 3, quick 1)")
    ap.add_argument("--bare-worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = args.steps or (20 if args.quick else 60)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.bare_worker is not None:
        print(json.dumps(bare(args.bare_worker, steps)))
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            from llmpipe.train.byte_shards import write_byte_shards

            data = write_byte_shards(TEXT, Path(tmp) / "shards", seq_len=SEQ_LEN)
        cmd = [sys.executable, __file__, "--bare-worker", str(data), "--steps", str(steps)]
        refs, ours = [], []
        for i in range(args.repeats):  # alternate the sides so that load from elsewhere hits both alike
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            refs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            ours.append(trainer(data, steps, 1, Path(tmp) / f"run{i}", env))
    print(f"model {MODEL}, batch {BATCH} x {SEQ_LEN} tokens, {steps} steps ({steps // 2} timed), "
          f"{args.threads} threads, fp32, CPU, {args.repeats} alternating run(s) per side")  # fmt: skip
    for key, label in (("tokens_per_s", "tokens/s (wall)"), ("tokens_per_cpu_s", "tokens per CPU-second")):
        a = [v for r in refs for v in r[key]]
        b = [v for r in ours for v in r[key]]
        print(f"{label}, per step: best | median")
        print(f"  bare PyTorch loop : {max(a):8.0f} | {statistics.median(a):8.0f}")
        print(f"  llmpipe trainer   : {max(b):8.0f} | {statistics.median(b):8.0f}")
        best, med = max(b) / max(a), statistics.median(b) / statistics.median(a)
        print(
            f"  trainer / bare    : {best:8.3f} | {med:8.3f}   (overhead {100 * (1 - best):+.1f}% best-step)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
