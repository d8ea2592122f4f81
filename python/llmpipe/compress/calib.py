"""Calibration sequences for GPTQ and Wanda, drawn from llmpipe shards (the curation pipeline's output)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from llmpipe.errors import InputError


def calibration_tokens(
    shards: Path | None, n_seqs: int = 32, *, seed: int = 0, split: str = "train"
) -> torch.Tensor:
    """``n_seqs`` random rows of the split as a LongTensor [n, seq_len] (inputs only, no target shift)."""
    from llmpipe.data import ShardDataset

    if shards is None:
        raise InputError(
            "this method needs calibration data: pass --calib SHARDS (a `llmpipe curate` output)"
        )
    ds = ShardDataset(shards, split, verify="blocks")
    if len(ds) == 0:
        raise InputError(f"{shards}: no {split} samples for calibration")
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(ds), size=min(n_seqs, len(ds)), replace=False)
    rows = np.stack([np.asarray(ds[int(i)][:-1], dtype=np.int64) for i in sorted(idx)])
    return torch.from_numpy(rows)
