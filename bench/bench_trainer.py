"""Trainer overhead on CPU: tokens/s of train/pretrain.py (under torchrun, FSDP2, loader, guard, metrics,
async checkpoints off the hot path) against a bare single-process PyTorch loop of the same model, the
same batch shape and the same data, measured in the same run with the same threads. Prints the ratio.

    python bench/bench_trainer.py [--quick] [--threads 2] [--data SHARDS]

Both sides run fp32 so that the compute is identical (bf16 on CPU varies with the kernel library);
each runs in its own fresh process, the first half of the steps is warm-up, and the sides alternate
over several runs (best of each), since this machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TEXT = ROOT.parent / "shared" / "data" / "reference" / "books" / "tiny-shakespeare.txt"
MODEL = {"dim": 256, "n_layers": 4, "n_heads": 8}
SEQ_LEN, BATCH = 256, 8


def bare(data: Path, steps: int) -> dict[str, float]:
    """The reference: model, AdamW, clipping, a random batch per step; nothing else."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from llmpipe.data import ShardDataset

    from train.model import ModelConfig, Transformer

    ds = ShardDataset(data, "train", verify="none")
    cfg = ModelConfig(**MODEL, vocab_size=ds.vocab_size, max_seq_len=ds.seq_len)  # type: ignore[arg-type]
    torch.manual_seed(0)
    model = Transformer(cfg)
    model.init_weights(seed=0)  # the trainer's default seed: the same initial weights
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(0)
    warm = steps // 2
    t0 = 0.0
    for i in range(steps):
        if i == warm:
            t0 = time.perf_counter()
        rows, _ = ds.gather(rng.integers(0, len(ds), BATCH))
        x, y = torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:].copy())
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    dt = time.perf_counter() - t0
    return {"tokens_per_s": (steps - warm) * BATCH * SEQ_LEN / dt, "final_loss": float(loss)}


def trainer(data: Path, steps: int, nproc: int, out: Path, env: dict[str, str]) -> dict[str, float]:
    warm = steps // 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
        f"--master_port={port}", str(ROOT / "train/pretrain.py"), "--data", str(data), "--out", str(out),
        *(f"--model.{k}={v}" for k, v in MODEL.items()), f"--data.batch_size={BATCH // nproc}",
        f"--train.steps={steps}", f"--train.log_every={warm}", "--train.val_every=0",
        "--parallel.mixed_precision=fp32", "--metrics.tensorboard=false", "--optim.warmup_steps=10",
        "--model.doc_mask=false", "--checkpoint.every=0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in recs if r.get("step") == steps and "tokens_per_s" in r][0]
    return {"tokens_per_s": last["tokens_per_s"], "final_loss": last["loss"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads for both sides")
    ap.add_argument("--steps", type=int, default=0, help="steps per side (default 60, quick 20)")
    ap.add_argument(
        "--data", type=Path, default=None, help="shards with seq_len 256 (default: bytes of text)"
    )
    ap.add_argument("--bare-worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = args.steps or (20 if args.quick else 60)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.bare_worker is not None:
        print(json.dumps(bare(args.bare_worker, steps)))
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            from train.byte_shards import write_byte_shards

            data = write_byte_shards(TEXT, Path(tmp) / "shards", seq_len=SEQ_LEN)
        cmd = [sys.executable, __file__, "--bare-worker", str(data), "--steps", str(steps)]
        refs, ours = [], []
        for i in range(args.repeats):  # alternate the sides so that load from elsewhere hits both alike
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            refs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            ours.append(trainer(data, steps, 1, Path(tmp) / f"run{i}", env))
    ref = max(refs, key=lambda r: r["tokens_per_s"])
    best = max(ours, key=lambda r: r["tokens_per_s"])
    ratio = best["tokens_per_s"] / ref["tokens_per_s"]
    print(f"model {MODEL}, batch {BATCH} x {SEQ_LEN} tokens, {steps} steps ({steps // 2} timed), "
          f"{args.threads} threads, fp32, CPU, best of {args.repeats} alternating runs")  # fmt: skip
    print("bare PyTorch loop : " + ", ".join(f"{r['tokens_per_s']:.0f}" for r in refs) + " tokens/s")
    print("llmpipe trainer   : " + ", ".join(f"{r['tokens_per_s']:.0f}" for r in ours) + " tokens/s")
    print(f"trainer / bare    : {ratio:.3f}  (overhead {100 * (1 - ratio):+.1f}%, best against best)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
