"""Exact deduplication: 128-bit hash of the normalised text, global over every input of the run.

``resolve`` is a hash-partitioned group-by: a shuffle of the (id, hash) rows by hash (one map task
per key file, ``llmpipe.curate.shuffle``), then one group-by per partition (every copy of a text lands in the same one), both
through the executor; the driver only concatenates the drops and sorts them by id.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.executors import Executor, map_with
from llmpipe.curate.groups import hash_words, smaller_ids
from llmpipe.curate.shuffle import partition_files, shuffle
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalStage, RunContext
from llmpipe.curate.workdir import read_parquet, write_table_atomic

KEY_SCHEMA = pa.schema([("id", pa.string()), ("hash", pa.binary(16))])


class ExactDedup(GlobalStage):
    """Keeps, of every group of identical (normalised) texts, the document with the smallest id."""

    name: ClassVar[str] = "exact_dedup"

    @dataclass
    class Config:
        enabled: bool = True
        lowercase: bool = True
        collapse_whitespace: bool = True
        seed: int = 0

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: Config) -> ExactDedup | None:
        return cls(cfg) if cfg.enabled else None

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        raw = _core.content_hashes(
            string_buffers(batch.column("text")),
            seed=self.cfg.seed,
            lowercase=self.cfg.lowercase,
            collapse_whitespace=self.cfg.collapse_whitespace,
        )
        hashes = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(16), batch.num_rows, [None, pa.py_buffer(raw)]
        )
        return pa.table({"id": batch.column("id"), "hash": hashes})

    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        rows = sum(pq.read_metadata(f).num_rows for f in key_files)
        return resolve_partitioned(key_files, workdir, max(1, -(-rows // ROWS_PER_PARTITION)), executor)


#: key rows (16-byte hash + id, ~60 bytes in memory) grouped by one partition task: ~256 MB
ROWS_PER_PARTITION = 4_000_000


def shuffle_keys(key_file: Path, file_no: int, parts: int, out: Path) -> None:
    """Map step: route the (id, hash) rows of one key file to partition ``hash % parts``."""
    shuffle(out, file_no, parts, _by_hash(key_file, parts))


def _by_hash(key_file: Path, parts: int) -> Iterator[tuple[pa.Table, np.ndarray]]:
    t = read_parquet(key_file, columns=["id", "hash"])
    h = t.column("hash").combine_chunks()
    raw = np.frombuffer(h.buffers()[1], np.uint8)[h.offset * 16 : (h.offset + len(h)) * 16]
    yield t, raw.reshape(-1, 16)[:, :8].copy().view("<u8").ravel() % np.uint64(parts)


def partition_drops(files: Sequence[Path], out: Path) -> Path:
    """Per partition (every row of a hash is in one): (id, dup_of) for all but the smallest id."""
    if out.exists():
        return out
    tables = [read_parquet(f, columns=["id", "hash"]) for f in files]
    keys = pa.concat_tables(tables) if tables else KEY_SCHEMA.empty_table()
    ids, dup_of = smaller_ids(keys.column("id"), hash_words(keys.column("hash")))
    write_table_atomic(out, pa.table({"id": ids, "dup_of": dup_of}))
    return out


def resolve_partitioned(
    key_files: Sequence[Path], workdir: Path, parts: int, executor: Executor | None = None
) -> pa.Table:
    """Group by hash in ``parts`` hash partitions (tasks of ``executor``), then sort the drops by id."""
    if not key_files:
        return DROPS_SCHEMA.empty_table()
    if parts == 1:
        inputs = [list(key_files)]
    else:
        shuffled = workdir / "shuffle"
        map_with(
            executor,
            shuffle_keys,
            [(f, i, parts, shuffled) for i, f in enumerate(key_files)],
            "exact_dedup shuffle",
        )
        inputs = [partition_files(shuffled, p) for p in range(parts)]
    outs = map_with(
        executor,
        partition_drops,
        [(fs, workdir / "drops" / f"{p:05d}.parquet") for p, fs in enumerate(inputs)],
        "exact_dedup groups",
    )
    drops = pa.concat_tables([read_parquet(o) for o in outs]).sort_by("id")
    return pa.table(
        {
            "id": drops["id"],
            "reason": pa.array(["exact_duplicate"] * drops.num_rows, pa.string()),
            "dup_of": drops["dup_of"],
        },
        schema=DROPS_SCHEMA,
    )
