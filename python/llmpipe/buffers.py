"""Arrow string columns as the (offsets, data) buffers the Rust core reads in place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

Texts: TypeAlias = Sequence[str] | pa.Array | pa.ChunkedArray


def string_buffers(texts: Texts) -> tuple[np.ndarray, np.ndarray]:
    """int64 offsets and the data buffer of ``texts`` as one Arrow large_string array (nulls = "")."""
    if isinstance(texts, pa.ChunkedArray):
        arr = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    elif isinstance(texts, pa.Array):
        arr = texts
    else:
        arr = pa.array(list(texts), pa.large_string())
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    if arr.null_count:
        arr = arr.fill_null("")
    _, offs, data = arr.buffers()
    n = len(arr)
    if offs is None:
        return np.zeros(n + 1, np.int64), np.zeros(0, np.uint8)
    offsets = np.frombuffer(offs, dtype=np.int64)[arr.offset : arr.offset + n + 1]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return np.ascontiguousarray(offsets), raw
