"""The global stages' hash shuffle (``llmpipe.curate.shuffle``): rows land in their partition in
order, a file's marker comes last and makes a re-run skip it, and a failed step leaves no file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from llmpipe.curate.shuffle import partition_files, shuffle


def _rows(n: int, start: int = 0) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(np.arange(start, start + n, dtype=np.uint64))})


def _routed(parts: int, batches: int = 3) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    for b in range(batches):
        rows = _rows(10, 10 * b)
        yield rows, rows.column("x").to_numpy() % np.uint64(parts)


def test_rows_go_to_their_partition_in_order(tmp_path: Path) -> None:
    out = tmp_path / "shuffle"
    for f in range(2):
        shuffle(out, f, 4, _routed(4))
    for p in range(4):
        files = partition_files(out, p)
        assert [x.name for x in files] == ["000000.parquet", "000001.parquet"]
        for x in files:
            assert pq.read_table(x).column("x").to_pylist() == [v for v in range(30) if v % 4 == p]
    assert sorted(x.name for x in out.glob("*.done")) == ["000000.done", "000001.done"]
    # a partition no row was routed to has no file
    shuffle(out, 2, 5, iter([(_rows(3), np.array([0, 0, 3], np.uint64))]))
    assert [x.name for x in partition_files(out, 3)][-1] == "000002.parquet"
    assert all(x.name != "000002.parquet" for p in (1, 2, 4) for x in partition_files(out, p))


def test_one_partition_takes_every_row(tmp_path: Path) -> None:
    shuffle(tmp_path, 0, 1, _routed(1))
    (only,) = partition_files(tmp_path, 0)
    assert pq.read_table(only).column("x").to_pylist() == list(range(30))


def test_a_finished_file_is_not_read_again(tmp_path: Path) -> None:
    shuffle(tmp_path, 0, 2, _routed(2))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.parquet")}

    def must_not_run() -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        raise AssertionError("a file with a marker was shuffled again")
        yield  # pragma: no cover

    shuffle(tmp_path, 0, 2, must_not_run())
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.parquet")} == before


def test_a_failed_step_leaves_no_file_and_no_marker(tmp_path: Path) -> None:
    def fails() -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        yield from _routed(3, batches=2)
        raise OSError("node lost")

    with pytest.raises(OSError, match="node lost"):
        shuffle(tmp_path, 0, 3, fails())
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    shuffle(tmp_path, 0, 3, _routed(3))  # the retry writes everything
    assert sum(pq.read_metadata(x).num_rows for p in range(3) for x in partition_files(tmp_path, p)) == 30
