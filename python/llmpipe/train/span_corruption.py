"""T5 span corruption, built on the fly from the packed shards (``model.arch=encoder_decoder``).

Each packed row of the shards (``seq_len + 1`` tokens, the decoder's input and its last target) is one
T5 example. A seeded noise mask (T5's ``random_spans_noise_mask``) marks ``round(n * noise_density)``
tokens in ``round(noise / mean_span_length)`` spans; the encoder reads the row with each noise span
replaced by one sentinel, the decoder writes each sentinel followed by the span it replaced:

    row      a b c d e f g h i j
    encoder  a b <extra_id_0> e f g <extra_id_1> j ... EOS
    targets  <extra_id_0> c d <extra_id_1> h i ... EOS

Every token of the row is in exactly one of the two (T5's length arithmetic: ``inputs = n - noise +
spans + 1`` and ``targets = noise + spans + 1``, both fixed for a given n, so batches need no padding).
To train at a given encoder length, curate with the raw length ``span_math.raw_length_for`` gives
(T5's ``compute_input_and_target_lengths``).

The extra ids are ``<pad>`` (the decoder's start token, as in T5), then ``<extra_id_0>``, ``<extra_id_1>``,
... at consecutive ids from ``span.extra_ids_from`` (filled in at the start of a run and saved in its
config.yaml): those the shards reserved (``llmpipe curate --special-tokens t5``, in their manifest), else
the ids after the tokenizer's vocabulary, by which the model's vocabulary grows when ``model.vocab_size``
is not set (train/t5.py ``prepare``).

The mask of the row at global position ``i`` of epoch ``e`` is drawn from ``(data.seed, e, i)`` alone:
the same masks on any number of ranks, and a resumed run sees exactly what an uninterrupted one saw.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llmpipe.data import Batch
from llmpipe.data.loader import MixtureLoader, TokenLoader
from llmpipe.errors import ConfigError
from llmpipe.tokenizer import PAD
from llmpipe.train.span_math import SpanLengths, span_lengths

PAD_TOKEN = PAD  # the names curate --special-tokens t5 reserves (llmpipe.tokenizer)


@dataclass
class SpanConfig:
    """T5 span corruption (``model.arch=encoder_decoder``; train/span_corruption.py)."""

    noise_density: float = 0.15  # share of each row's tokens that the decoder predicts
    mean_span_length: float = 3.0  # mean length of the corrupted spans
    # the first extra id (<pad>, then the sentinels): 0 = the tokenizer's vocabulary size, filled in at start
    extra_ids_from: int = 0


def _segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """``num_items`` split into ``num_segments`` non-empty segments uniformly at random: their lengths."""
    boundaries = np.arange(num_items - 1) < (num_segments - 1)
    rng.shuffle(boundaries)
    first_in_segment = np.concatenate([[False], boundaries])
    segment_id = np.cumsum(first_in_segment)
    return np.bincount(segment_id, minlength=num_segments)


def noise_mask(lengths: SpanLengths, rng: np.random.Generator) -> np.ndarray:
    """T5's ``random_spans_noise_mask``: alternating non-noise and noise spans, non-noise first."""
    noise = _segmentation(lengths.noise, lengths.spans, rng)
    keep = _segmentation(lengths.raw - lengths.noise, lengths.spans, rng)
    interleaved = np.stack([keep, noise], axis=1).reshape(-1)
    starts = np.cumsum(interleaved)[:-1]
    indicator = np.zeros(lengths.raw, dtype=np.int64)
    indicator[starts] = 1
    return (np.cumsum(indicator) % 2) == 1


@dataclass
class Seq2SeqBatch(Batch):
    """A span-corrupted batch: ``input`` is the encoder's, ``target`` the labels (-100: padding),
    ``decoder_input`` the labels shifted right after the start token."""

    decoder_input: torch.Tensor | None = None


class SpanCorruptor:
    """Turns packed rows into T5 examples (see the module's docstring)."""

    def __init__(self, cfg: SpanConfig, raw_len: int, eos_id: int, seed: int) -> None:
        if not 0 < cfg.noise_density < 1 or cfg.mean_span_length < 1:
            raise ConfigError("span.noise_density must be in (0, 1) and span.mean_span_length >= 1")
        self.cfg, self.eos_id, self.seed = cfg, eos_id, seed
        self.lengths = span_lengths(raw_len, cfg.noise_density, cfg.mean_span_length)
        self.pad_id = cfg.extra_ids_from
        self.first_sentinel = cfg.extra_ids_from + 1

    @property
    def extra_ids(self) -> int:
        """<pad> and one sentinel per span."""
        return 1 + self.lengths.spans

    def rng(self, key: tuple[int, ...]) -> np.random.Generator:
        return np.random.default_rng([self.seed, 0x7535, *key])

    def row(
        self, tokens: np.ndarray, padded: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(encoder input, labels) of one row; ``padded`` marks its padding (not predicted: -100)."""
        mask = noise_mask(self.lengths, rng)
        starts = mask & ~np.concatenate([[False], mask[:-1]])  # first token of each noise span
        span_no = np.cumsum(starts) - 1  # the span of each noise token
        sentinels = self.first_sentinel + span_no
        enc = np.where(starts, sentinels, tokens)[~mask | starts]
        # targets: each span's sentinel (where the span begins), then its tokens
        gaps = ~mask & np.concatenate([[True], mask[:-1]])  # first token of each kept span
        gap_no = np.cumsum(gaps) - 1
        label_tok = np.where(padded, -100, tokens)
        keep_targets = mask | gaps
        labels = np.where(gaps, self.first_sentinel + gap_no, label_tok)[keep_targets]
        enc = np.concatenate([enc, [self.eos_id]])
        labels = np.concatenate([labels, [self.eos_id]])
        assert len(enc) == self.lengths.inputs and len(labels) == self.lengths.targets
        return enc, labels

    def batch(self, b: Batch, keys: list[tuple[int, ...]]) -> Seq2SeqBatch:
        """The packed batch ``b`` (rows keyed by their global position) as a span-corrupted batch."""
        inp, tgt = b.input.cpu().numpy(), b.target.cpu().numpy()
        last = tgt[:, -1:]
        rows = np.concatenate([inp, np.where(last == -100, self.eos_id, last)], axis=1).astype(np.int64)
        padded = np.concatenate([np.zeros((len(rows), 1), dtype=bool), tgt == -100], axis=1)
        enc, lab = zip(
            *(self.row(r, p, self.rng(k)) for r, p, k in zip(rows, padded, keys, strict=True)), strict=True
        )
        labels = torch.from_numpy(np.stack(lab))
        dec = torch.cat([torch.full((len(rows), 1), self.pad_id), labels[:, :-1]], dim=1)
        dec = dec.masked_fill(dec == -100, self.pad_id)
        device = b.input.device
        return Seq2SeqBatch(
            torch.from_numpy(np.stack(enc)).to(device),
            labels.to(device),
            None,
            decoder_input=dec.to(device),
        )


def row_keys(loader: TokenLoader) -> list[tuple[int, ...]]:
    """The global position of each row of the batch ``loader`` handed out last (its state is already
    past that batch): (epoch, index in the epoch's order), or (position in the mixture's order,)."""
    g, b, r = loader.global_batch, loader.batch_size, loader.rank
    if isinstance(loader, MixtureLoader):
        first = loader.position - g + r * b
        return [(1, first + i) for i in range(b)]
    first = loader.consumed - g + r * b
    return [(0, loader.epoch, first + i) for i in range(b)]


class SpanCorruptionLoader:
    """The run's loader with every batch span-corrupted; its state is the wrapped loader's."""

    def __init__(self, loader: TokenLoader, corruptor: SpanCorruptor) -> None:
        self.loader, self.corruptor = loader, corruptor

    def __iter__(self) -> Iterator[Seq2SeqBatch]:
        for b in self.loader:
            yield self.corruptor.batch(b, row_keys(self.loader))

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
