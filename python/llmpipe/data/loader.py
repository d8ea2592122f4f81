"""The training loader: a seeded global order per epoch, sliced by rank, prefetched, exactly resumable.

Order: epoch ``e`` visits every sample once in ``permutation(seed, e)``. Step ``s`` of the run takes the
global batch ``perm[s*G : (s+1)*G]`` with ``G = batch_size * world_size``; rank ``r`` gets the ``r``-th
slice of ``batch_size``. The state is the number of samples consumed globally, so a run restored on
another number of ranks continues the same global order: nothing repeated, nothing skipped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llmpipe.data.dataset import ShardDataset

CHUNK = 4  # batches per hand-off from the prefetch thread


@dataclass
class Batch:
    input: torch.Tensor  # [B, L] int64
    target: torch.Tensor  # [B, L] int64, -100 where the position is padding
    doc_ids: torch.Tensor | None  # [B, L] int32 document index within the row (attention masking);
    # None when the loader was built with ``doc_ids=False`` (the model then masks nothing)


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


class TokenLoader:
    """Iterates batches for one rank; ``state_dict``/``load_state_dict`` resume at the next sample."""

    def __init__(
        self,
        dataset: ShardDataset,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        device: str | torch.device = "cpu",
        prefetch: int = 4,
        infinite: bool = True,
        doc_ids: bool = True,
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

    def _indices_at(self, epoch: int, consumed: int) -> tuple[np.ndarray, int, int]:
        """This rank's indices for the global batch starting at ``consumed``; returns the next position."""
        n = len(self.ds)
        if consumed + self.global_batch > n:  # drop the ragged tail of an epoch, start the next
            epoch, consumed = epoch + 1, 0
        perm = self._permutation(epoch)
        start = consumed + self.rank * self.batch_size
        return perm[start : start + self.batch_size], epoch, consumed + self.global_batch

    def _make(self, idx: np.ndarray) -> Batch:
        # numpy, single-threaded: small element-wise work must not wake torch's intra-op thread pool,
        # which competes with the training step for the same cores
        rows, valid = self.ds.gather(idx)
        x = rows[:, :-1]
        y = rows[:, 1:].copy()
        if valid.min() <= self.ds.seq_len:  # only padded rows need their targets masked
            y[np.arange(self.ds.seq_len)[None, :] >= (valid[:, None] - 1)] = -100
        out = [torch.from_numpy(x), torch.from_numpy(y)]
        if self.doc_ids:
            is_eos = x == self.ds.eos_id
            out.append(torch.from_numpy(np.cumsum(is_eos, axis=1, dtype=np.int32) - is_eos))
        if self.device.type == "cuda":
            out = [t.contiguous().pin_memory().to(self.device, non_blocking=True) for t in out]
        return Batch(out[0], out[1], out[2] if self.doc_ids else None)

    # -- iteration --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        # batches cross from the prefetch thread in groups of CHUNK: one queue hand-off (thread wake-up
        # and GIL transfer, ~0.2 ms) per group instead of per batch
        chunk = max(1, min(CHUNK, self.prefetch))
        q: queue.Queue[Any] = queue.Queue(maxsize=max(1, -(-self.prefetch // chunk)))
        stop = threading.Event()
        epoch, consumed = self.epoch, self.consumed

        def put(item: Any) -> None:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        def produce() -> None:
            e, c = epoch, consumed
            try:
                while not stop.is_set():
                    group = []
                    while len(group) < chunk:
                        if not self.infinite and c + self.global_batch > len(self.ds):
                            break
                        idx, e, c = self._indices_at(e, c)
                        group.append((self._make(idx), e, c))
                    if group:
                        put(group)
                    if len(group) < chunk:
                        put(None)
                        return
            except BaseException as exc:  # surface loader errors in the consumer
                put(exc)

        t = threading.Thread(target=produce, name="llmpipe-prefetch", daemon=True)
        t.start()
        try:
            while True:
                item = q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                for batch, e, c in item:
                    # the state advances only when a batch is handed out, never when it is prefetched
                    self.epoch, self.consumed = e, c
                    yield batch
        finally:
            stop.set()
            t.join(timeout=5)

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
        if state["num_samples"] != len(self.ds):
            raise ValueError(
                f"loader state is for {state['num_samples']} samples, the dataset has {len(self.ds)}"
            )
        if state["seed"] != self.seed:
            raise ValueError(f"loader state has seed {state['seed']}, the loader {self.seed}")
        self.epoch = int(state["epoch"])
        self.consumed = int(state["consumed"])
