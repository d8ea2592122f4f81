"""The group-by of the dedup stages: of every group of rows with one key, all but the smallest id.

Arrow's sort kernel and numpy, not Acero (``Table.group_by``/``join``): importing ``pyarrow.acero``
loads ``pyarrow.dataset`` and pandas, ~0.4 CPU-s in every process that resolves a dedup stage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def smaller_ids(ids: pa.Array | pa.ChunkedArray, keys: Sequence[np.ndarray]) -> tuple[pa.Array, pa.Array]:
    """``(id, dup_of)`` of every row whose id is not the smallest of the rows with its key, and
    that smallest id: what ``group_by(key).aggregate(id min)`` joined back on the key and filtered to
    ``id != id_min`` gives. ``ids`` are distinct strings (compared as UTF-8 bytes, as Arrow's min
    does); ``keys``: one array per key column, each one value per row (the key is their tuple)."""
    arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    n = len(arr)
    if n < 2:
        return arr.slice(0, 0), arr.slice(0, 0)
    by_id = pc.sort_indices(arr).to_numpy()
    # lexsort is stable: within a key the rows stay in id order; its last key sorts first
    order = by_id[np.lexsort([k[by_id] for k in reversed(keys)])]
    same = np.ones(n - 1, dtype=bool)
    for k in keys:
        s = k[order]
        same &= s[1:] == s[:-1]
    dup = np.flatnonzero(same) + 1  # positions (in ``order``) of rows after the first of their key
    if dup.size == 0:
        return arr.slice(0, 0), arr.slice(0, 0)
    start = np.ones(n, dtype=bool)
    start[dup] = False
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))  # each row's group start
    take = pa.array(order[dup])
    keeper = pa.array(order[first[dup]])
    return arr.take(take), arr.take(keeper)


def hash_words(hashes: pa.Array | pa.ChunkedArray) -> list[np.ndarray]:
    """A ``binary(16)`` column as two uint64 key columns (for ``smaller_ids``)."""
    h = hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes
    raw = np.frombuffer(h.buffers()[1], np.uint8)[h.offset * 16 : (h.offset + len(h)) * 16]
    words = raw.reshape(-1, 16).view("<u8")
    return [np.ascontiguousarray(words[:, 0]), np.ascontiguousarray(words[:, 1])]
