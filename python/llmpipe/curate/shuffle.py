"""The hash shuffle of the global stages: rows of many files regrouped into partitions by a hash.

The map step (``shuffle``, one task per input file ``F``) writes the rows routed to partition ``P``
to ``OUT/part-P/F.parquet`` (only partitions that receive rows), every file by atomic rename, then
the marker ``OUT/F.done``: a step whose marker exists is skipped, so a retried task or a resumed run
redoes only unfinished files and writes the same bytes. A partition's rows are then
``partition_files(OUT, P)``, in file order; within a file rows keep their order.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

from llmpipe.curate.workdir import AtomicParquetWriter

#: rows and the partition of each row (an unsigned integer array, values below ``parts``)
Routed = Iterable[tuple[pa.RecordBatch | pa.Table, np.ndarray]]


def partition_dir(out: Path, p: int) -> Path:
    return out / f"part-{p:05d}"


def partition_files(out: Path, p: int) -> list[Path]:
    """The files of partition ``p`` (one per input file that routed rows to it), in file order."""
    d = partition_dir(out, p)
    return sorted(d.glob("*.parquet")) if d.is_dir() else []


def shuffle(out: Path, file_no: int, parts: int, routed: Routed) -> None:
    """Map step of input file ``file_no``: route each row to its partition (see the module).

    ``routed`` yields (rows, partition of each row), all rows of one schema; it is only iterated when
    the file's marker is missing (pass a generator, so a finished file is not read again)."""
    done = out / f"{file_no:06d}.done"
    if done.exists():
        return
    writers: dict[int, AtomicParquetWriter] = {}

    def write(p: int, rows: pa.RecordBatch | pa.Table) -> None:
        if p not in writers:
            writers[p] = AtomicParquetWriter(partition_dir(out, p) / f"{file_no:06d}.parquet")
        writers[p].write(rows)

    try:
        for rows, part in routed:
            if parts == 1:
                write(0, rows)
                continue
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(parts + 1, dtype=part.dtype))
            for p in range(parts):
                sel = order[bounds[p] : bounds[p + 1]]
                if sel.size:
                    write(p, rows.take(pa.array(sel)))
        for w in writers.values():
            w.commit()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    done.touch()
