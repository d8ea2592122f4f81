"""Loss, perplexity and bits per byte of a causal LM on texts or on the val split of shards."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmpipe.errors import ConfigError, ShardError
from llmpipe.eval.model import LM, load_lm, wrap_lm
from llmpipe.eval.score import EvalResult, Window, score_windows, windows
from llmpipe.progress import Progress


class Evaluator:
    """Scores texts with one model: ``Evaluator(load_lm("runs/x")).texts(["..."])``.

    ``batch_size`` windows per forward pass; ``stride`` (default ``max_len``: lm-eval's rolling windows)
    is how many new tokens each window after the first predicts. ``progress``: a bar on a terminal, else
    a line every few seconds on stderr, as the windows are scored (``llmpipe eval`` turns it on)."""

    def __init__(
        self,
        lm: LM,
        *,
        batch_size: int = 8,
        stride: int | None = None,
        max_len: int | None = None,
        progress: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be positive, got {batch_size}")
        self.lm = lm
        self.progress = progress
        self.batch_size = batch_size
        self.max_len = min(max_len or lm.max_len, lm.max_len)
        self.stride = stride
        if stride is not None and not 1 <= stride <= self.max_len:
            raise ConfigError(f"stride {stride} must be between 1 and the window length {self.max_len}")

    def texts(self, texts: Iterable[str], *, rank: int = 0, world_size: int = 1) -> EvalResult:
        """Every text a document: all its tokens predicted once, after the prefix token."""
        texts = list(texts)
        docs = self.lm.encode(texts) if texts else []
        ws = windows(docs, self.lm.prefix_id, self.max_len, self.stride)
        nll = self._score(ws, rank, world_size)
        n_bytes = sum(len(t.encode("utf-8", "replace")) for t in texts)
        return EvalResult(float(nll.sum()), sum(len(d) for d in docs), n_bytes, len(texts))

    def groups(self, groups: Mapping[str, Sequence[str]]) -> dict[str, EvalResult]:
        """Per named group of texts (one batched pass over all of them)."""
        names = list(groups)
        texts = [t for n in names for t in groups[n]]
        owner = [i for i, n in enumerate(names) for _ in groups[n]]
        docs = self.lm.encode(texts) if texts else []
        ws = windows(docs, self.lm.prefix_id, self.max_len, self.stride)
        nll = self._score(ws, 0, 1)
        per_doc = np.zeros(len(texts))
        np.add.at(per_doc, [w.doc for w in ws], nll)
        out = {n: EvalResult(0.0, 0, 0, 0) for n in names}
        for i, t in enumerate(texts):
            out[names[owner[i]]] += EvalResult(
                float(per_doc[i]), len(docs[i]), len(t.encode("utf-8", "replace")), 1
            )
        return out

    def shards(self, directory: str | Path, split: str = "val", max_samples: int | None = None) -> EvalResult:
        """The packed samples of a shard split as they are (each predicts its tokens after the first);
        bytes are those the predicted ids spell, special tokens counting 0."""
        from llmpipe.data import ShardDataset
        from llmpipe.data.format import check_same_tokenizer

        ds = ShardDataset(directory, split, verify="blocks")
        ds.require_samples(f"pass --shards DIR with a {split} split, or --split train")
        lengths = self.lm.byte_lengths
        if lengths is None:
            raise ConfigError(
                "bits per byte of shards needs a byte-level tokenizer (tokenizers' tokenizer.json)"
            )
        if ds.vocab_size > self.lm.vocab_size:
            raise ShardError(
                f"{directory}: vocabulary of {ds.vocab_size} ids, the model has {self.lm.vocab_size}"
            )
        check_same_tokenizer(Path(directory), self.lm.tokenizer_json, self.lm.name)
        if ds.seq_len > self.max_len:
            raise ShardError(
                f"{directory}: samples of {ds.seq_len} tokens, longer than the model's {self.max_len}"
            )
        n = len(ds) if max_samples is None else min(len(ds), max_samples)
        rows, valid = ds.gather(np.arange(n, dtype=np.int64))
        ws = [Window(i, rows[i, : valid[i] - 1], rows[i, 1 : valid[i]], 0) for i in range(n) if valid[i] > 1]
        nll = self._score(ws, 0, 1)
        tokens = sum(len(w.targets) for w in ws)
        n_bytes = int(sum(int(lengths[w.targets].sum()) for w in ws))
        return EvalResult(float(nll.sum()), tokens, n_bytes, len(ws))

    def _score(self, ws: list[Window], rank: int, world_size: int) -> np.ndarray:
        bar = Progress(len(ws), "eval", "windows") if self.progress and rank == 0 else None
        try:
            return score_windows(
                self.lm.forward,
                ws,
                batch_size=self.batch_size,
                device=self.lm.device,
                pad_id=self.lm.prefix_id,
                rank=rank,
                world_size=world_size,
                on_batch=None if bar is None else lambda n: bar.update(n * world_size),
            )
        finally:
            if bar is not None:
                bar.close()


def evaluate(
    model: str | os.PathLike[str] | Any,
    texts: Iterable[str],
    *,
    tokenizer: Any = None,
    batch_size: int = 8,
    stride: int | None = None,
    max_len: int | None = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
) -> EvalResult:
    """Loss, perplexity and bits per byte of a model on texts (each text one document).

    ``model`` is a run directory, a local HF model directory, an ``LM``, or a model in memory (a
    transformers causal LM or the trainer's ``Transformer``) given with its ``tokenizer``."""
    if isinstance(model, LM):
        lm = model
    elif isinstance(model, str | os.PathLike):
        lm = load_lm(Path(model), device=device, dtype=dtype)
    else:
        if tokenizer is None:
            raise ConfigError("a model in memory needs its tokenizer: evaluate(model, texts, tokenizer=tok)")
        lm = wrap_lm(model, tokenizer, device=device)
    return Evaluator(lm, batch_size=batch_size, stride=stride, max_len=max_len).texts(texts)
