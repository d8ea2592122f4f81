"""Line and paragraph dedup across the run (CCNet's line dedup, Dolma's paragraph dedup).

A segment (a line, or a paragraph: text between blank lines) whose normalised key occurs in more
than ``max_occurrences`` documents of the run is removed from every document, or from all but the
first of them (``keep_first``: the document with the smallest id, the run's order as in
``exact_dedup``). A segment repeated inside one document counts once.

The count is exact and its memory bounded, like ``exact_dedup``: ``prepare`` writes each
document's distinct segment keys (Rust, one call per batch); ``resolve`` shuffles the (id, key)
rows into hash partitions on disk and counts each partition in one task, writing the repeated keys
(with their first document) to ``repeated.parquet``; the next segment rewrites every document
(Rust, one call per batch), holding only the repeated keys in memory.

Keys: ``" ".join(segment.split()).lower()`` hashed with xxh3-128; segments whose key has fewer than
``min_chars`` characters (blank ones always) are neither counted nor removed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.executors import Executor, map_with
from llmpipe.curate.shuffle import partition_files
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalRewrite, Mapped, Mapper, RunContext
from llmpipe.curate.stages.exact_dedup import shuffle_keys
from llmpipe.curate.workdir import fault_point, read_parquet, write_table_atomic

KEY_SCHEMA = pa.schema([("id", pa.string()), ("hash", pa.binary(16))])
REPEATED_SCHEMA = pa.schema([("hash", pa.binary(16)), ("keep", pa.string())])
#: (id, key) rows counted by one partition task (~60 bytes each in memory): ~256 MB
ROWS_PER_PARTITION = 4_000_000


def _fixed16(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The bytes of a ``binary(16)`` column, 16 per row, as uint8."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if len(arr) == 0:
        return np.zeros(0, np.uint8)
    return np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * 16 : (arr.offset + len(arr)) * 16]


class LineDedup(GlobalRewrite):
    """Removes segments (lines or paragraphs) repeated across more than ``max_occurrences`` documents."""

    name: ClassVar[str] = "line_dedup"

    @dataclass
    class Config:
        enabled: bool = False
        #: "line" (split on \n) or "paragraph" (split on blank lines, \n\n)
        unit: str = "line"
        #: a segment in more documents than this is removed (1: every segment seen in two documents)
        max_occurrences: int = 1
        #: keep each repeated segment in its first document (smallest id); False: remove it everywhere
        keep_first: bool = True
        #: segments whose normalised text has fewer characters are left alone (0: every non-blank one)
        min_chars: int = 0
        seed: int = 0

    def __init__(self, cfg: Config) -> None:
        if cfg.unit not in ("line", "paragraph"):
            raise ValueError(f"line_dedup.unit must be 'line' or 'paragraph', not {cfg.unit!r}")
        if cfg.max_occurrences < 1:
            raise ValueError("line_dedup.max_occurrences must be at least 1")
        if cfg.min_chars < 0:
            raise ValueError("line_dedup.min_chars must not be negative")
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: Config) -> LineDedup | None:
        return cls(cfg) if cfg.enabled else None

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        offsets, data = string_buffers(batch.column("text"))
        c = self.cfg
        docs, raw = _core.segment_keys(offsets, data, c.unit, c.min_chars, c.seed)
        idx = np.frombuffer(memoryview(docs), np.uint32)
        keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(idx), [None, pa.py_buffer(raw)])
        return pa.table({"id": batch.column("id").take(pa.array(idx)), "hash": keys}, schema=KEY_SCHEMA)

    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        out = workdir / "repeated.parquet"
        if out.exists():
            return DROPS_SCHEMA.empty_table()
        rows = sum(pq.read_metadata(f).num_rows for f in key_files)
        parts = max(1, -(-rows // ROWS_PER_PARTITION))
        if parts == 1:
            inputs = [list(key_files)]
        else:
            shuffled = workdir / "shuffle"
            args = [(f, i, parts, shuffled) for i, f in enumerate(key_files)]
            map_with(executor, shuffle_keys, args, "line_dedup shuffle")
            inputs = [partition_files(shuffled, p) for p in range(parts)]
        outs = map_with(
            executor,
            count_partition,
            [
                (fs, workdir / "counts" / f"{p:05d}.parquet", self.cfg.max_occurrences)
                for p, fs in enumerate(inputs)
            ],
            "line_dedup counts",
        )
        tables = [read_parquet(o) for o in outs]
        repeated = pa.concat_tables(tables) if tables else REPEATED_SCHEMA.empty_table()
        write_table_atomic(out, repeated.sort_by("hash"))
        return DROPS_SCHEMA.empty_table()

    def rewriter(self, resolved: Path, key_file: Path) -> Mapper:
        # the repeated keys are few (one row per key found in several documents), shared by all parts
        return DropRepeated(self.cfg, resolved / "repeated.parquet")


def count_partition(files: Sequence[Path], out: Path, max_occurrences: int) -> Path:
    """Per hash partition: the keys in more than ``max_occurrences`` documents, with the smallest id."""
    if out.exists():
        return out
    tables = [read_parquet(f, columns=["id", "hash"]) for f in files]
    keys = pa.concat_tables(tables) if tables else KEY_SCHEMA.empty_table()
    counts = keys.group_by("hash").aggregate([("id", "count"), ("id", "min")])
    rep = counts.filter(pc.greater(counts["id_count"], max_occurrences))
    write_table_atomic(out, pa.table({"hash": rep["hash"], "keep": rep["id_min"]}, schema=REPEATED_SCHEMA))
    fault_point(f"line_dedup counts {out.stem}")
    return out


@lru_cache(maxsize=2)
def _load_repeated(path: str) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """The repeated keys (sorted, 16 bytes each), and each key's first document and key."""
    t = read_parquet(path)
    keys = t.column("hash").combine_chunks()
    return np.ascontiguousarray(_fixed16(keys)), t.column("keep").combine_chunks(), keys


class DropRepeated(Mapper):
    """The rewrite of ``line_dedup``: each document without its repeated segments."""

    name: ClassVar[str] = LineDedup.name
    removed_words_counter: ClassVar[str | None] = "words_removed"

    @dataclass
    class Config:  # built by LineDedup, never from YAML
        enabled: bool = False

    def __init__(self, cfg: LineDedup.Config, repeated: Path) -> None:
        self.cfg = cfg
        self.repeated = repeated

    @classmethod
    def from_config(cls, cfg: Config) -> None:
        return None

    def map(self, batch: pa.RecordBatch) -> Mapped:
        rep, keep, keys = _load_repeated(str(self.repeated))
        ids = batch.column("id")
        exempt_docs = np.zeros(0, np.uint32)
        exempt_keys = np.zeros(0, np.uint8)
        if self.cfg.keep_first and len(keep):
            mine = pc.is_in(keep, value_set=ids)
            if pc.any(mine).as_py():
                exempt_docs = pc.index_in(keep.filter(mine), value_set=ids).to_numpy().astype(np.uint32)
                exempt_keys = np.ascontiguousarray(_fixed16(keys.filter(mine)))
        text = batch.column("text")
        offsets, data = string_buffers(text)
        c = self.cfg
        offs, out, n, nbytes = _core.drop_segments(
            offsets, data, rep, exempt_docs, exempt_keys, c.unit, c.min_chars, c.seed
        )
        removed = np.frombuffer(memoryview(n), np.uint32)
        changed = int(np.count_nonzero(removed))
        if changed == 0:
            return Mapped(batch, 0)
        cleaned = pa.LargeStringArray.from_buffers(len(text), pa.py_buffer(offs), pa.py_buffer(out))
        if cleaned.type != text.type:
            cleaned = cleaned.cast(text.type)
        idx = batch.schema.get_field_index("text")
        counters = Counter(
            {
                f"{c.unit}s_removed": int(removed.sum()),
                "bytes_removed": int(np.frombuffer(memoryview(nbytes), np.int64).sum()),
            }
        )
        return Mapped(batch.set_column(idx, "text", cleaned), changed, counters=counters)
