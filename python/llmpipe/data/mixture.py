"""Weighted mixtures of shard directories: one seeded global sample order over several sources.

Position ``p`` of the order (samples consumed globally since the start of the run) maps to a source and
one of its samples as a function of the seed, the sources and the stages only: any number of ranks
slices the same order, and a resume is a position.

- Token ratio: a weight is a share of *target tokens*. A source whose samples hold fewer real tokens
  (padding) is drawn more often: its share of samples is proportional to ``weight / tokens_per_sample``.
- Blocks: the order is laid out in blocks of ``block`` positions from the start of a segment (a stage, or
  what follows an exhausted source). Block ``j`` holds ``L_i(j + 1) - L_i(j)`` samples of source ``i``,
  where ``L(T)`` apportions ``T`` positions among the sample shares by largest remainder: at every block
  boundary each source is within one sample of its share. The labels of a block are shuffled by
  ``rng(seed, segment start, j)``.
- Within a source, its ``k``-th draw is sample ``permutation(seed, source, k // N)[k % N]``: epochs of a
  fresh permutation. A source capped at ``max_epochs`` runs out after ``max_epochs * N`` draws; from the
  exact position of the draw that would exceed the cap the order either ends (``stop``) or continues with
  the other sources' weights renormalised (``renormalize``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from llmpipe.data.dataset import ShardDataset
from llmpipe.errors import ConfigError, ShardError

Policy = Literal["stop", "renormalize"]


@dataclass(frozen=True)
class MixSource:
    name: str
    num_samples: int
    tokens_per_sample: float  # mean target tokens per sample (``valid - 1``)
    max_epochs: int = 0  # 0: repeated without limit


@dataclass(frozen=True)
class MixStage:
    start: int  # the position (global sample index) from which these weights apply
    weights: tuple[float, ...]  # token shares, one per source (normalised over the active sources)


@dataclass(frozen=True)
class MixEvent:
    position: int
    message: str


def apportion(shares: np.ndarray, total: int) -> np.ndarray:
    """Largest-remainder split of ``total`` items by ``shares`` (summing to 1); ties to the lower index."""
    exact = shares * total
    base = np.floor(exact).astype(np.int64)
    rest = total - int(base.sum())
    if rest > 0:
        order = np.argsort(-(exact - base), kind="stable")
        base[order[:rest]] += 1
    return base


class MixtureOrder:
    """The global order: ``take(start, n)`` -> (source ids, sample ids within each source).

    Generated block by block and kept in a window from the last position asked for; asking for an
    earlier position replays from 0 (a resume does this once)."""

    def __init__(
        self,
        sources: Sequence[MixSource],
        stages: Sequence[MixStage],
        *,
        seed: int,
        policy: Policy = "stop",
        block: int = 1024,
    ) -> None:
        if not sources:
            raise ConfigError("a mixture needs at least one source")
        if not stages or stages[0].start != 0:
            raise ConfigError("a mixture's first stage must start at position 0")
        starts = [s.start for s in stages]
        if starts != sorted(set(starts)):
            raise ConfigError(f"mixture stages must start at increasing positions, got {starts}")
        for st in stages:
            if len(st.weights) != len(sources) or any(w < 0 or not math.isfinite(w) for w in st.weights):
                raise ConfigError(f"stage at {st.start}: one non-negative weight per source expected")
            if sum(st.weights) <= 0:
                raise ConfigError(f"stage at {st.start}: the weights sum to zero")
        self.sources = list(sources)
        self.stages = list(stages)
        self.seed = seed
        self.policy = policy
        self.block = block
        self._tokens = np.array([s.tokens_per_sample for s in sources], dtype=np.float64)
        self._caps = np.array(
            [s.max_epochs * s.num_samples if s.max_epochs > 0 else np.iinfo(np.int64).max for s in sources],
            dtype=np.int64,
        )
        self._reset()

    # -- generation -------------------------------------------------------------------------------
    def _reset(self) -> None:
        n = len(self.sources)
        self.draws = np.zeros(n, dtype=np.int64)  # draws per source up to the generation frontier
        self.exhausted = np.zeros(n, dtype=bool)
        self.events: list[MixEvent] = []
        self.end: int | None = None  # the position where the order ends, once known
        self._frontier = 0  # next position to generate
        self._stage = -1
        self._segment(0, self._weights(0))
        self._win_start = 0
        self._win_src: list[np.ndarray] = []
        self._win_local: list[np.ndarray] = []
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def _weights(self, stage: int) -> np.ndarray:
        self._stage = stage
        return np.array(self.stages[stage].weights, dtype=np.float64)

    def _segment(self, start: int, weights: np.ndarray) -> None:
        """Start a segment at ``start``: sample shares from the token weights of the active sources."""
        w = np.where(self.exhausted, 0.0, weights)
        if w.sum() <= 0:
            self.end = start
            return
        p = (w / self._tokens) / (w / self._tokens).sum()
        self._seg_start, self._seg_shares = start, p
        smallest = p[p > 0].min()
        # every active source gets at least one sample per block: block counts never go negative
        self._seg_block = max(self.block, math.ceil(1.0 / smallest))
        self._seg_weights = weights

    def _local(self, src: int, first: int, count: int) -> np.ndarray:
        """Sample ids of source ``src``'s draws ``first .. first + count - 1``."""
        n = self.sources[src].num_samples
        k = first + np.arange(count, dtype=np.int64)
        epochs = k // n
        out = np.empty(count, dtype=np.int64)
        for e in np.unique(epochs):
            key = (src, int(e))
            if key not in self._perms:
                self._perms = {kk: v for kk, v in self._perms.items() if kk[0] != src}
                self._perms[key] = np.random.default_rng([self.seed, src, int(e)]).permutation(n)
            sel = epochs == e
            out[sel] = self._perms[key][k[sel] % n]
        return out

    def _generate(self) -> bool:
        """Append the next block (or the part of it before a stage change or an exhausted source) to the
        window; False when the order has ended."""
        if self.end is not None and self._frontier >= self.end:
            return False
        nxt = self._stage + 1
        if nxt < len(self.stages) and self.stages[nxt].start <= self._frontier:
            self._segment(self._frontier, self._weights(nxt))
            self.events.append(
                MixEvent(self._frontier, f"mixture stage {nxt}: weights {self._named(self._seg_weights)}")
            )
            if self.end is not None:
                return False
        s0, k = self._seg_start, self._seg_block
        j = (self._frontier - s0) // k
        hi = s0 + (j + 1) * k
        if nxt < len(self.stages):
            hi = min(hi, self.stages[nxt].start)
        lo_t, hi_t = self._frontier - s0, hi - s0
        counts = apportion(self._seg_shares, hi_t) - apportion(self._seg_shares, lo_t)
        labels = np.repeat(np.arange(len(self.sources), dtype=np.int64), counts)
        # generation always starts at a block boundary (a replay starts at 0, a segment at its start)
        perm = np.random.default_rng([self.seed, s0, j]).permutation(len(labels))
        labels = labels[perm]
        cut = len(labels)
        over = self.draws + counts > self._caps
        for i in np.flatnonzero(over):
            first_over = int(np.flatnonzero(labels == i)[self._caps[i] - self.draws[i]])
            cut = min(cut, first_over)
        labels = labels[:cut]
        local = np.empty(cut, dtype=np.int64)
        for i in np.unique(labels):
            sel = labels == i
            c = int(sel.sum())
            local[sel] = self._local(int(i), int(self.draws[i]), c)
            self.draws[i] += c
        self._win_src.append(labels)
        self._win_local.append(local)
        self._frontier += cut
        if over.any():
            self._exhaust(over)
        return True

    def _exhaust(self, over: np.ndarray) -> None:
        done = [i for i in np.flatnonzero(over) if self.draws[i] >= self._caps[i]]
        if not done:
            return
        self.exhausted[done] = True
        names = ", ".join(f"{self.sources[i].name} (max_epochs {self.sources[i].max_epochs})" for i in done)
        if self.policy == "stop":
            self.end = self._frontier
            self.events.append(MixEvent(self._frontier, f"source {names} exhausted: the data ends here"))
            return
        self._segment(self._frontier, self._seg_weights)
        if self.end is not None:
            self.events.append(
                MixEvent(self._frontier, f"source {names} exhausted: no source left, the data ends here")
            )
        else:
            self.events.append(
                MixEvent(
                    self._frontier,
                    f"source {names} exhausted: weights renormalised to "
                    f"{self._named(np.where(self.exhausted, 0.0, self._seg_weights))}",
                )
            )

    def _named(self, w: np.ndarray) -> str:
        total = float(w.sum()) or 1.0
        return ", ".join(f"{s.name}={v / total:.4g}" for s, v in zip(self.sources, w, strict=True))

    # -- access -----------------------------------------------------------------------------------
    def take(self, start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions ``start .. start + n - 1`` (fewer where the order ends): (source ids, sample ids)."""
        if start < self._win_start:
            self._reset()
        while self._frontier < start + n and self._generate():
            pass
        # drop whole blocks before ``start``
        while self._win_src and self._win_start + len(self._win_src[0]) <= start:
            self._win_start += len(self._win_src.pop(0))
            self._win_local.pop(0)
        src = np.concatenate(self._win_src) if self._win_src else np.zeros(0, np.int64)
        loc = np.concatenate(self._win_local) if self._win_local else np.zeros(0, np.int64)
        a = start - self._win_start
        return src[a : a + n], loc[a : a + n]


class MixedShards:
    """Several shard directories (one split each) read as one: their shards concatenated, so the loader's
    Rust batch builder gathers from every source by one global index (``offsets[source] + sample``)."""

    def __init__(self, names: Sequence[str], datasets: Sequence[ShardDataset]) -> None:
        if len(set(names)) != len(names):
            raise ConfigError(f"mixture source names must be unique, got {list(names)}")
        first = datasets[0]
        for name, ds in zip(names[1:], datasets[1:], strict=True):
            if ds.tokenizer_sha256 != first.tokenizer_sha256:
                raise ShardError(
                    f"sources {names[0]!r} ({first.directory}, tokenizer sha256 {first.tokenizer_sha256}) "
                    f"and {name!r} ({ds.directory}, tokenizer sha256 {ds.tokenizer_sha256}) were "
                    "tokenised differently; a mixture needs one tokenizer"
                )
            if ds.seq_len != first.seq_len:
                raise ShardError(
                    f"sources {names[0]!r} ({first.directory}, seq_len {first.seq_len}) and {name!r} "
                    f"({ds.directory}, seq_len {ds.seq_len}) differ in seq_len; a mixture needs one"
                )
        self.names = list(names)
        self.datasets = list(datasets)
        self.directory = Path(", ".join(str(d.directory) for d in datasets))
        self.split = first.split
        self.seq_len = first.seq_len
        self.vocab_size = max(d.vocab_size for d in datasets)
        self.eos_id = first.eos_id
        self.tokenizer_sha256 = first.tokenizer_sha256
        # one tokenizer: a source curated with --tokenizer and no --special-tokens records none of them
        self.special_tokens = {k: v for d in reversed(self.datasets) for k, v in d.special_tokens.items()}
        self.offsets = np.cumsum([0, *(len(d) for d in datasets)]).astype(np.int64)
        valid = [np.concatenate(d.valid_buffers).astype(np.int64) for d in datasets]
        # target tokens per global sample (int32: 4 bytes per sample of the whole mixture)
        self._targets = np.maximum(np.concatenate(valid) - 1, 0).astype(np.int32)
        self.tokens_per_sample = [float(np.maximum(v - 1, 0).mean()) for v in valid]

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def token_buffers(self) -> list[np.ndarray]:
        return [b for d in self.datasets for b in d.token_buffers]

    @property
    def valid_buffers(self) -> list[np.ndarray]:
        return [b for d in self.datasets for b in d.valid_buffers]

    def targets(self, global_ids: np.ndarray) -> np.ndarray:
        """Target tokens of each global sample."""
        return self._targets[global_ids]

    def mix_sources(self, max_epochs: Sequence[int]) -> list[MixSource]:
        return [
            MixSource(n, len(d), t, e)
            for n, d, t, e in zip(self.names, self.datasets, self.tokens_per_sample, max_epochs, strict=True)
        ]

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": n, "num_samples": len(d)} for n, d in zip(self.names, self.datasets, strict=True)]
