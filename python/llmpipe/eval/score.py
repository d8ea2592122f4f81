"""Negative log-likelihood of token sequences under a causal LM, long sequences by sliding window.

A document of N tokens is scored as ``[prefix] + tokens``: every token is predicted once, the first from
the prefix alone (the EOS that separates documents in training, or a model's BOS). Windows hold at most
``max_len`` tokens; the first predicts the first ``max_len`` tokens, each later one the next ``stride``
tokens with the ``max_len - stride`` tokens before them as extra context. ``stride == max_len`` is
lm-evaluation-harness's ``loglikelihood_rolling`` (disjoint windows, the last one filled with context
from before it); a smaller stride gives each prediction more context at more compute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from llmpipe.errors import ConfigError

# (input ids [B, T] int64, attention mask [B, T] int64: 1 real, 0 right padding) -> logits [B, T, V]
Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

LN2 = math.log(2.0)


@dataclass
class EvalResult:
    """Totals over some texts. ``loss`` is the mean NLL per token in nats, ``ppl`` its exponential and
    ``bpb`` bits per UTF-8 byte (``nll / (ln 2 * bytes)``), which does not depend on the tokenizer."""

    nll: float  # total negative log-likelihood, nats
    tokens: int  # tokens predicted
    bytes: int  # UTF-8 bytes of the text those tokens spell
    docs: int = 0

    @property
    def loss(self) -> float:
        return self.nll / self.tokens if self.tokens else float("nan")

    @property
    def ppl(self) -> float:
        return math.exp(self.loss) if self.tokens else float("nan")

    @property
    def bpb(self) -> float:
        return self.nll / (LN2 * self.bytes) if self.bytes else float("nan")

    def __add__(self, other: EvalResult) -> EvalResult:
        return EvalResult(
            self.nll + other.nll, self.tokens + other.tokens, self.bytes + other.bytes, self.docs + other.docs
        )

    def to_dict(self) -> dict[str, float | int | None]:
        """The totals and scores; a score with nothing to divide by (no bytes: a masked-LM loss on
        shards) is None, not nan, which JSON does not have."""
        return {
            "loss": self.loss if self.tokens else None,
            "ppl": self.ppl if self.tokens else None,
            "bpb": self.bpb if self.bytes else None,
            "tokens": self.tokens,
            "bytes": self.bytes,
            "docs": self.docs,
            "nll": self.nll,
        }


@dataclass
class Window:
    doc: int  # index of the document it belongs to
    ids: np.ndarray  # model input, int64, len <= max_len
    targets: np.ndarray  # the next token at each input position
    first: int  # positions before this are context only


def windows(
    docs: Sequence[Sequence[int] | np.ndarray], prefix_id: int, max_len: int, stride: int | None = None
) -> list[Window]:
    """The windows that predict every token of every document exactly once."""
    stride = max_len if stride is None else stride
    if max_len < 1 or not 1 <= stride <= max_len:
        raise ConfigError(f"need 1 <= stride ({stride}) <= max_len ({max_len})")
    out: list[Window] = []
    for d, toks in enumerate(docs):
        n = len(toks)
        if n == 0:
            continue
        seq = np.empty(n + 1, dtype=np.int64)
        seq[0] = prefix_id
        seq[1:] = np.asarray(toks, dtype=np.int64)
        a, b = 0, min(max_len, n)  # predict targets [a, b): seq[a + 1 : b + 1]
        while True:
            s = max(0, b - max_len)
            out.append(Window(d, seq[s:b], seq[s + 1 : b + 1], a - s))
            if b == n:
                break
            a, b = b, min(b + stride, n)
    return out


def _batch(ws: Sequence[Window], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(w.ids) for w in ws)
    ids = torch.full((len(ws), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(ws), width), dtype=torch.int64)
    targets = torch.full((len(ws), width), -100, dtype=torch.int64)
    for i, w in enumerate(ws):
        n = len(w.ids)
        ids[i, :n] = torch.from_numpy(w.ids)
        mask[i, :n] = 1
        targets[i, w.first : n] = torch.from_numpy(w.targets[w.first :])
    return ids, mask, targets


@torch.no_grad()
def score_windows(
    forward: Forward,
    ws: Sequence[Window],
    *,
    batch_size: int,
    device: torch.device,
    pad_id: int = 0,
    rank: int = 0,
    world_size: int = 1,
    on_batch: Callable[[int], None] | None = None,
) -> np.ndarray:
    """NLL (nats, float64) of each window's predicted tokens; batched, longest windows first.

    With ``world_size > 1`` each rank scores every ``world_size``-th window (the others stay 0: sum over
    ranks) and every rank runs the same number of forward passes, as FSDP needs. ``on_batch(n)`` is
    called after each forward pass with the number of windows it scored (progress)."""
    nll = np.zeros(len(ws), dtype=np.float64)
    order = sorted(range(len(ws)), key=lambda i: -len(ws[i].ids))[rank::world_size]
    per_rank = math.ceil(len(ws) / world_size)
    for start in range(0, math.ceil(per_rank / batch_size) * batch_size, batch_size):
        idx = order[start : start + batch_size]
        if not idx:  # this rank has run out of windows: keep step with the others
            forward(torch.full((1, 1), pad_id, device=device), torch.ones((1, 1), device=device).long())
            continue
        ids, mask, targets = _batch([ws[i] for i in idx], pad_id)
        logits = forward(ids.to(device), mask.to(device))
        losses = F.cross_entropy(
            logits.float().flatten(0, 1), targets.to(device).flatten(), ignore_index=-100, reduction="none"
        ).view(len(idx), -1)
        nll[idx] = losses.double().sum(dim=1).cpu().numpy()
        if on_batch is not None:
            on_batch(len(idx))
    return nll
