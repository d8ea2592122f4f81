"""Bits per byte of a model on the validation split of llmpipe shards (``llmpipe eval --shards`` reports the same).

bits/byte = (sum of next-token cross-entropy in nats) / ln 2 / (UTF-8 bytes of the predicted tokens).
A token's byte length is read from the byte-level BPE vocabulary of the shards' tokenizer (one
vocabulary character per byte; special tokens count zero bytes), so the figure is comparable across
tokenizers. Padding positions are skipped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from llmpipe.errors import InputError


def token_bytes(tokenizer: Path) -> torch.Tensor:
    """UTF-8 bytes of every token id of a byte-level BPE tokenizer.json (0 for special tokens)."""
    doc = json.loads(tokenizer.read_text())
    if doc["model"].get("type") != "BPE":  # a loadable tokenizer (model_io checks): its model is a mapping
        raise InputError(
            f"{tokenizer}: bits per byte need a byte-level BPE tokenizer, not {doc['model'].get('type')}"
        )
    vocab: dict[str, int] = doc["model"]["vocab"]
    special = {t["id"] for t in doc.get("added_tokens", []) if t.get("special")}
    size = max([*vocab.values(), *special]) + 1
    out = torch.zeros(size, dtype=torch.float64)
    for tok, i in vocab.items():
        if i not in special:
            out[i] = len(tok)
    return out


@torch.no_grad()
def bits_per_byte(
    model: nn.Module, shards: Path | None, *, max_rows: int = 64, batch: int = 8, split: str = "val"
) -> float:
    from llmpipe.data import ShardDataset
    from llmpipe.data.format import TOKENIZER_FILE

    if shards is None:
        raise InputError("no evaluation shards: pass --eval SHARDS")
    ds = ShardDataset(shards, split, verify="blocks")
    nbytes = token_bytes(shards / TOKENIZER_FILE)
    ds.require_samples(f"pass --eval DIR: shards with a {split} split to measure bits per byte on")
    n = min(max_rows, len(ds))
    nats, total_bytes = 0.0, 0.0
    for i in range(0, n, batch):
        idx = range(i, min(i + batch, n))
        rows = torch.from_numpy(np.stack([np.asarray(ds[j], dtype=np.int64) for j in idx]))
        valid = torch.tensor([ds.valid(j) for j in idx])
        inp, tgt = rows[:, :-1], rows[:, 1:]
        keep = torch.arange(tgt.shape[1])[None, :] < (valid[:, None] - 1)
        logits = model(inp).float()
        ce = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="none").view_as(tgt)
        nats += float((ce * keep).sum())
        total_bytes += float((nbytes[tgt] * keep).sum())
    return nats / math.log(2) / max(total_bytes, 1.0)
