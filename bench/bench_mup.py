"""muP learning-rate transfer: the best learning rate on a small grid at width 64 and at width 256, with
muP (model.mup_base_dim = 64) and without (the standard parametrisation, the peer), in the same run on
the same data. Prints the best grid point per width and how many grid steps it moved.

    python bench/bench_mup.py [--steps 150] [--depth 2] [--batch 16] [--data SHARDS]

Each run: the trainer's model and AdamW groups (train/model.py, train/optim.py), 4 heads,
byte-level tiny Shakespeare, seq 64, warmup 10 then cosine (train/optim.py), fp32 on one CPU
thread; the score is the validation loss (8 batches of the val split) at the end. A run that diverges
(loss not finite) scores infinity.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "reference" / "books" / "tiny-shakespeare.txt"
LRS = [2.0**-k for k in range(11, 3, -1)]  # 2^-11 .. 2^-4, one grid step = a factor 2
WIDTHS = (64, 256)
SEQ, VAL_BATCHES = 64, 8


def train(data: Path, width: int, lr: float, *, mup: bool, steps: int, depth: int, batch_size: int) -> float:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from llmpipe.data import ShardDataset
    from llmpipe.train.config import OptimConfig
    from llmpipe.train.model import ModelConfig, Transformer
    from llmpipe.train.optim import build_optimizer, build_scheduler

    train_ds, val_ds = ShardDataset(data, "train", verify="none"), ShardDataset(data, "val", verify="none")
    cfg = ModelConfig(
        dim=width, n_layers=depth, n_heads=4, vocab_size=train_ds.vocab_size, max_seq_len=SEQ,
        mup_base_dim=WIDTHS[0] if mup else 0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg)
    model.init_weights(0)
    ocfg = OptimConfig(lr=lr, warmup_steps=10, weight_decay=0.0)
    opt = build_optimizer(model, ocfg)
    sched = build_scheduler(opt, ocfg, steps)
    rng = np.random.default_rng(0)

    def batch(ds: ShardDataset, idx: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.stack([np.asarray(ds[int(i)][: SEQ + 1]) for i in idx]), dtype=torch.long)

    for _ in range(steps):
        t = batch(train_ds, rng.integers(0, len(train_ds), batch_size))
        loss = F.cross_entropy(model(t[:, :-1]).flatten(0, 1), t[:, 1:].flatten())
        if not torch.isfinite(loss):
            return math.inf
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for b in range(VAL_BATCHES):
            t = batch(val_ds, np.arange(b * batch_size, (b + 1) * batch_size) % len(val_ds))
            total += float(F.cross_entropy(model(t[:, :-1]).flatten(0, 1), t[:, 1:].flatten()))
    val = total / VAL_BATCHES
    return val if math.isfinite(val) else math.inf


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--data", type=Path, help="byte shards (default: written from tiny Shakespeare)")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            from llmpipe.train.byte_shards import write_byte_shards

            data = write_byte_shards(TEXT, Path(tmp) / "shards", seq_len=SEQ)
        print(
            f"lr grid: {', '.join(f'2^{round(math.log2(lr))}' for lr in LRS)}; {args.steps} steps, "
            f"depth {args.depth}, batch {args.batch}"
        )
        for mup in (False, True):
            best = {}
            for width in WIDTHS:
                losses = [
                    train(data, width, lr, mup=mup, steps=args.steps, depth=args.depth, batch_size=args.batch)
                    for lr in LRS
                ]
                best[width] = min(range(len(LRS)), key=lambda i: losses[i])
                row = " ".join(f"{v:6.3f}" for v in losses)
                print(
                    f"{'muP' if mup else 'SP '} width {width:4d}: {row}  best 2^{round(math.log2(LRS[best[width]]))}"
                )
            moved = abs(best[WIDTHS[1]] - best[WIDTHS[0]])
            print(
                f"{'muP' if mup else 'SP '}: best lr moved {moved} grid step(s) from width {WIDTHS[0]} to {WIDTHS[1]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
