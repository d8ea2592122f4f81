"""The training loader: a seeded global order per epoch, sliced by rank, prefetched, exactly resumable.

Order: epoch ``e`` visits every sample once in ``permutation(seed, e)``. Step ``s`` of the run takes the
global batch ``perm[s*G : (s+1)*G]`` with ``G = batch_size * world_size``; rank ``r`` gets the ``r``-th
slice of ``batch_size``. The state is the number of samples consumed globally, so a run restored on
another number of ranks continues the same global order: nothing repeated, nothing skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llmpipe import _core
from llmpipe.data.dataset import ShardDataset
from llmpipe.data.format import MANIFEST
from llmpipe.data.mixture import MixedShards, MixEvent, MixtureOrder
from llmpipe.errors import ShardError


@dataclass
class Batch:
    # input and target are views of one [B, L + 1] buffer of ids (int32 by default: half the bytes of
    # int64 through memory and PCIe; nn.Embedding takes int32, the loss widens targets on device);
    # target is a separate masked copy only when a row of the batch is padded
    input: torch.Tensor  # [B, L]
    target: torch.Tensor  # [B, L], -100 where the position is padding
    doc_ids: torch.Tensor | None  # [B, L] int32 document index within the row (attention masking);
    # None when the loader was built with ``doc_ids=False`` (the model then masks nothing)


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


class TokenLoader:
    """Iterates batches for one rank; ``state_dict``/``load_state_dict`` resume at the next sample."""

    def __init__(
        self,
        dataset: ShardDataset | MixedShards,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        device: str | torch.device = "cpu",
        prefetch: int = 4,
        infinite: bool = True,
        doc_ids: bool = True,
        dtype: torch.dtype = torch.int32,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.ds = dataset
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.device = torch.device(device)
        self.prefetch = prefetch
        self.infinite = infinite
        self.doc_ids = doc_ids
        if dtype not in (torch.int64, torch.int32):
            raise ValueError(f"dtype must be torch.int64 or torch.int32, not {dtype}")
        self.dtype = "int64" if dtype == torch.int64 else "int32"
        self.global_batch = batch_size * world_size
        if len(dataset) < self.global_batch:
            raise ValueError(
                f"{len(dataset)} samples in split {dataset.split!r} but one global batch needs "
                f"{self.global_batch} (batch_size {batch_size} x world_size {world_size})"
            )
        self.epoch = 0
        self.consumed = 0  # samples consumed globally in the current epoch
        self._perm_epoch = -1
        self._perm = np.zeros(0, dtype=np.int64)

    # -- order ----------------------------------------------------------------------------------
    def _permutation(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:
            self._perm = epoch_permutation(len(self.ds), self.seed, epoch)
            self._perm_epoch = epoch
        return self._perm

    # -- iteration --------------------------------------------------------------------------------
    def _plan(self, epoch: int, consumed: int) -> tuple[np.ndarray, np.ndarray, int]:
        """This rank's samples for the rest of ``epoch`` from ``consumed``, one row per batch, and the
        global position after each batch; rolls to the next epoch when no full global batch is left."""
        n, g, b = len(self.ds), self.global_batch, self.batch_size
        if consumed + g > n:
            epoch, consumed = epoch + 1, 0
        starts = np.arange(consumed, n - g + 1, g, dtype=np.int64)
        idx = starts[:, None] + (self.rank * b + np.arange(b, dtype=np.int64))[None, :]
        return self._permutation(epoch)[idx], starts + g, epoch

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory().to(self.device, non_blocking=True)

    def _tensors(self, raw: tuple[Any, Any, Any]) -> Batch:
        b, w = self.batch_size, self.ds.seq_len + 1
        rows_buf, tgt_buf, doc_buf = raw
        ids = np.frombuffer(rows_buf, dtype=rows_buf.dtype)
        self._check_ids(ids)
        rows = torch.from_numpy(ids.reshape(b, w))
        tgt = None if tgt_buf is None else torch.from_numpy(np.frombuffer(tgt_buf, dtype=tgt_buf.dtype))
        docs = None if doc_buf is None else torch.from_numpy(np.frombuffer(doc_buf, dtype=np.int32))
        if self.device.type == "cuda":  # one pinned copy of the rows serves inputs and targets
            rows = self._to_device(rows)
            tgt = None if tgt is None else self._to_device(tgt)
            docs = None if docs is None else self._to_device(docs)
        target = rows[:, 1:] if tgt is None else tgt.view(b, w - 1)
        return Batch(rows[:, :-1], target, None if docs is None else docs.view(b, w - 1))

    def _check_ids(self, ids: np.ndarray) -> None:
        """Every id of a batch below the manifest's vocab_size (a few microseconds per batch, before
        the model looks anything up by id: an out-of-range id is an IndexError on CPU, a device-side
        assert on GPU)."""
        if not len(ids):
            return
        low, high = int(ids.min()), int(ids.max())
        if low >= 0 and high < self.ds.vocab_size:
            return
        where = (
            f"{self.ds.directory / MANIFEST}"
            if isinstance(self.ds, ShardDataset)
            else f"the manifests of {self.ds.directory}"
        )
        raise ShardError(
            f"{where}: the shards hold token id {high if high >= self.ds.vocab_size else low} but the "
            f"manifest's vocab_size is {self.ds.vocab_size} (the manifest does not describe these shards)"
        )

    def _stream(self, plan: np.ndarray) -> Iterator[tuple[int, Batch]]:
        """Batches of ``plan`` (one row of sample indices per batch) in order, as (row, batch).

        Built by a Rust thread (gather, widen, shift, mask, doc ids; no GIL) up to ``prefetch`` ahead;
        on CUDA the next batch's host-to-device copy is issued before the current one is handed out."""
        stream = _core.BatchStream(
            self.ds.token_buffers,
            self.ds.valid_buffers,
            self.ds.seq_len + 1,
            np.ascontiguousarray(plan.reshape(-1)),
            self.batch_size,
            self.ds.eos_id,
            dtype=self.dtype,
            doc_ids=self.doc_ids,
            depth=max(1, self.prefetch),
        )
        # on CUDA, hold one converted batch back so its copy overlaps the caller's step
        hold = 1 if self.device.type == "cuda" else 0
        ready: list[tuple[int, Batch]] = []
        for k in range(len(plan)):
            try:
                raw = stream.next()
            except ShardError as e:  # raised in the prefetch thread, handed over here
                raise ShardError(f"{self.ds.directory} ({self.ds.split}): {e}") from e
            if raw is None:
                raise RuntimeError("batch stream ended before its plan")  # a bug, not bad input
            ready.append((k, self._tensors(raw)))
            if len(ready) > hold:
                yield ready.pop(0)
        yield from ready

    def __iter__(self) -> Iterator[Batch]:
        # The state advances only when a batch is handed out.
        epoch, consumed = self.epoch, self.consumed
        while True:
            if not self.infinite and consumed + self.global_batch > len(self.ds):
                return
            plan, after, epoch = self._plan(epoch, consumed)
            for k, batch in self._stream(plan):
                self.epoch, self.consumed = epoch, int(after[k])
                yield batch
            consumed = int(after[-1]) if len(after) else consumed

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "num_samples": len(self.ds),
            "global_batch": self.global_batch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "num_samples" not in state:
            raise ValueError("loader state is for a mixture of sources, this run reads one directory")
        if state["num_samples"] != len(self.ds):
            raise ValueError(
                f"loader state is for {state['num_samples']} samples, the dataset has {len(self.ds)}"
            )
        if state["seed"] != self.seed:
            raise ValueError(f"loader state has seed {state['seed']}, the loader {self.seed}")
        self.epoch = int(state["epoch"])
        self.consumed = int(state["consumed"])


class MixtureLoader(TokenLoader):
    """Batches of a weighted mixture of sources (``llmpipe.data.mixture``) for one rank.

    Global micro-batch ``m`` holds positions ``m*G .. (m+1)*G - 1`` of the mixture's order, rank ``r``
    the ``r``-th slice of ``batch_size``: the same order on any number of ranks. The state is the
    position (samples consumed globally) and the samples and target tokens seen per source. The
    iterator ends where the order ends (a source ran out under the ``stop`` policy)."""

    def __init__(
        self,
        shards: MixedShards,
        order: MixtureOrder,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        device: str | torch.device = "cpu",
        prefetch: int = 4,
        doc_ids: bool = True,
        dtype: torch.dtype = torch.int32,
        chunk: int | None = None,
    ) -> None:
        super().__init__(
            shards,
            batch_size,
            rank=rank,
            world_size=world_size,
            seed=order.seed,
            device=device,
            prefetch=prefetch,
            doc_ids=doc_ids,
            dtype=dtype,
        )
        self.shards = shards
        self.order = order
        # global micro-batches per Rust stream: one pass over the data by default, as the single-directory
        # loader's one stream per epoch (a new stream restarts the prefetch pipeline), at most ~1M
        # samples so the plan's arrays stay small for large mixtures
        self.chunk = chunk or max(64, min(len(shards), 1 << 20) // self.global_batch)
        self.position = 0
        n = len(shards.names)
        self.source_samples = np.zeros(n, dtype=np.int64)
        self.source_tokens = np.zeros(n, dtype=np.int64)
        self.ended = False  # the order ended (under the stop policy, or no source left)
        self._event_floor = -1  # events at or before a restored position were logged before the restart
        self._events_seen: set[tuple[int, str]] = set()

    def __iter__(self) -> Iterator[Batch]:
        g, b, n = self.global_batch, self.batch_size, len(self.shards.names)
        pos = self.position
        while True:
            src, local = self.order.take(pos, self.chunk * g)
            nb = len(src) // g
            if nb == 0:
                self.ended = True
                return
            src = src[: nb * g].reshape(nb, g)
            gid = (self.shards.offsets[src] + local[: nb * g].reshape(nb, g)).astype(np.int64)
            # the counters after each batch of the chunk, computed once: nothing per batch but a lookup
            key = (np.arange(nb, dtype=np.int64)[:, None] * n + src).ravel()
            per_batch = np.bincount(key, minlength=nb * n).reshape(nb, n)
            tok = np.bincount(key, weights=self.shards.targets(gid).ravel(), minlength=nb * n)
            samples_after = self.source_samples + np.cumsum(per_batch, axis=0)
            tokens_after = self.source_tokens + np.cumsum(tok.reshape(nb, n).astype(np.int64), axis=0)
            plan = gid[:, self.rank * b : (self.rank + 1) * b]
            for k, batch in self._stream(plan):
                self.position = pos + (k + 1) * g
                self.source_samples, self.source_tokens = samples_after[k], tokens_after[k]
                yield batch
            pos += nb * g

    def new_events(self) -> list[MixEvent]:
        """The order's events (stage switches, exhausted sources) up to the current position, each once."""
        out = []
        upto = self.position if not self.ended else max(self.position, self.order.end or 0)
        for e in self.order.events:
            key = (e.position, e.message)
            if e.position <= self._event_floor or e.position > upto or key in self._events_seen:
                continue
            self._events_seen.add(key)
            out.append(e)
        return out

    def source_stats(self) -> dict[str, int]:
        stats: dict[str, int] = {}
        for name, s, t in zip(self.shards.names, self.source_samples, self.source_tokens, strict=True):
            stats[f"tokens/{name}"] = int(t)
            stats[f"samples/{name}"] = int(s)
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "seed": self.seed,
            "sources": self.shards.describe(),
            "source_samples": self.source_samples.tolist(),
            "source_tokens": self.source_tokens.tolist(),
            "global_batch": self.global_batch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "position" not in state:
            raise ValueError("loader state is for a single shard directory, this run mixes sources")
        if state["sources"] != self.shards.describe():
            raise ValueError(
                f"loader state is for sources {state['sources']}, the run has {self.shards.describe()}"
            )
        if state["seed"] != self.seed:
            raise ValueError(f"loader state has seed {state['seed']}, the loader {self.seed}")
        self.position = int(state["position"])
        self.source_samples = np.asarray(state["source_samples"], dtype=np.int64)
        self.source_tokens = np.asarray(state["source_tokens"], dtype=np.int64)
        self._event_floor = self.position
