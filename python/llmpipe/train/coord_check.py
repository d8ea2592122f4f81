"""muP's coordinate check: how much a few Adam steps move the activations, as the width grows.

    python -m llmpipe.train.coord_check SHARDS [--widths 64 128 256 512] [--steps 4] [--lr 1e-2]

For each width the same small model (depth and head count fixed, ``dim`` = width) is built with and
without muP (``model.mup_base_dim`` = the smallest width), trained for a few steps on the same batch
of real tokens with the trainer's AdamW groups, and the mean absolute change of each coordinate of
the output logits and of the last block's output is measured. Under muP these stay about constant
across widths (the updates neither blow up nor vanish: learning rates transfer); in the standard
parametrisation the logits' change grows with the width. docs/training.md shows a run.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from llmpipe.train.config import OptimConfig
from llmpipe.train.model import ModelConfig, Transformer
from llmpipe.train.optim import build_optimizer


def activation_deltas(
    base: ModelConfig, width: int, tokens: torch.Tensor, *, mup: bool, steps: int, lr: float, seed: int = 0
) -> dict[str, float]:
    """Mean |change| per coordinate of the logits and of the last block's output after ``steps`` AdamW
    steps at a constant ``lr`` on ``tokens`` [B, L + 1] (fp32, CPU)."""
    cfg = replace(base, dim=width, mup_base_dim=base.dim if mup else 0)
    torch.manual_seed(seed)
    model = Transformer(cfg)
    model.init_weights(seed)
    captured: dict[str, torch.Tensor] = {}
    model.layers[-1].register_forward_hook(lambda _m, _i, out: captured.__setitem__("h", out.detach()))
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    with torch.no_grad():
        logits0 = model(inp)
    h0 = captured["h"]
    opt = build_optimizer(model, OptimConfig(lr=lr, weight_decay=0.0))
    for _ in range(steps):
        loss = F.cross_entropy(model(inp).flatten(0, 1), tgt.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        logits = model(inp)
    return {
        "logits": float((logits - logits0).abs().mean()),
        "hidden": float((captured["h"] - h0).abs().mean()),
    }


def coord_check(
    base: ModelConfig, widths: list[int], tokens: torch.Tensor, *, mup: bool, steps: int = 4, lr: float = 1e-2
) -> dict[int, dict[str, float]]:
    return {w: activation_deltas(base, w, tokens, mup=mup, steps=steps, lr=lr) for w in widths}


def sample_tokens(shards: Path, batch: int, seq_len: int) -> tuple[torch.Tensor, int]:
    """The first ``batch`` rows of the training shards, cut to ``seq_len + 1`` tokens; and the vocab."""
    from llmpipe.data import ShardDataset

    ds = ShardDataset(shards, "train", verify="none")
    rows = [torch.tensor(np.asarray(ds[i][: seq_len + 1]), dtype=torch.long) for i in range(batch)]
    return torch.stack(rows), ds.vocab_size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m llmpipe.train.coord_check", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("shards", type=Path)
    p.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    tokens, vocab = sample_tokens(args.shards, 8, 32)
    base = ModelConfig(dim=args.widths[0], n_layers=args.depth, n_heads=4, vocab_size=vocab, max_seq_len=32)
    for mup in (False, True):
        res = coord_check(base, args.widths, tokens, mup=mup, steps=args.steps, lr=args.lr)
        print("muP" if mup else "standard")
        for w, r in res.items():
            print(f"  width {w:5d}: logits {r['logits']:.4f}  hidden {r['hidden']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
