"""Exact-substring dedup (Lee et al. 2022, "Deduplicating Training Data Makes Language Models Better").

Every span of at least ``min_length`` bytes that occurs more than once in the run's kept text is
removed from all but its first occurrence (the run's order: documents by id, as ``exact_dedup``,
then by position); a span never crosses documents. It works on UTF-8 bytes, not token ids: the
default of 200 bytes is about the paper's 50 tokens for English with a GPT-2-style BPE (~4 bytes a
token). Removed spans are trimmed to whole characters; documents left without a word are dropped.

How, with bounded memory (``resolve``, each phase a task of the executor, resumable by atomic
outputs): the documents, ordered by id (an external sort: sorted runs per key file, merged a
block at a time, so no process holds a row per document of the run), are cut into partitions of
at most ``partition_bytes``;
each partition's text is written as one byte string (documents joined by 0xFF, never in UTF-8).
For every pair of partitions ``a <= b`` a suffix array (Rust, the ``divsufsort`` crate), its LCP
array (Kasai) and the longest previous match of every position are built over ``a + b``: a span
of ``b`` is a repeat when it also starts earlier in ``a + b``. The union over all ``a <= b`` is
exactly the repeats of ``b`` in the whole run. A task holds two partitions (about 13 bytes of
memory per byte of text); the cost is quadratic in the number of partitions (``k (k + 1) / 2``
suffix arrays), the honest price of exact cross-partition matches without Lee et al.'s on-disk
merge of suffix arrays. The spans found are written per input part (the key file of their
documents): the resolve merges one part's at a time and the rewrite of a part loads only its own.
"""

from __future__ import annotations

import bisect
import json
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.executors import Executor, map_with
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalRewrite, Mapped, Mapper, RunContext
from llmpipe.curate.workdir import (
    AtomicParquetWriter,
    atomic_path,
    fault_point,
    open_parquet,
    read_parquet,
    write_table_atomic,
)
from llmpipe.data.format import atomic_write_json
from llmpipe.errors import InputError

SEP = 0xFF
#: one suffix array covers two partitions and their separators (divsufsort's int32 indices)
MAX_PARTITION_BYTES = (2**31 - 1) // 2 - 1
SPANS_SCHEMA = pa.schema([("id", pa.string()), ("start", pa.int64()), ("end", pa.int64())])
#: the plan's rows: a document, its key file and row there, its bytes of text; sorted by those three
PLAN_SCHEMA = pa.schema(
    [("id", pa.string()), ("file", pa.int32()), ("row", pa.int64()), ("bytes", pa.int64())]
)
#: a partition's plan file: its documents in order
PARTITION_SCHEMA = pa.schema([("id", pa.string()), ("file", pa.int32()), ("row", pa.int64())])
#: the plan's external sort: rows per sorted run (a task holds one, ~70 bytes a row with ids of ~40
#: bytes), rows per batch of a run (a merge holds one batch per run), runs merged at once
RUN_ROWS = 1 << 17
BLOCK_ROWS = 1 << 12
FAN_IN = 64
#: rows per row group of a partition's plan file
PLAN_ROW_GROUP = 1 << 16
#: slices of merged blocks kept before they are copied into one table (each holds its whole batch)
COMPACT_PIECES = 64


class SubstringDedup(GlobalRewrite):
    """Removes the repeats of every span of at least ``min_length`` bytes (first occurrence kept)."""

    name: ClassVar[str] = "substring_dedup"

    @dataclass
    class Config:
        enabled: bool = False
        #: the shortest repeated span removed, in UTF-8 bytes (~50 BPE tokens of English)
        min_length: int = 200
        #: bytes of text per suffix-array partition (a task holds two: ~26 bytes of memory per byte)
        partition_bytes: int = 256 << 20

    def __init__(self, cfg: Config) -> None:
        if cfg.min_length < 1:
            raise ValueError("substring_dedup.min_length must be at least 1")
        if not 1 <= cfg.partition_bytes <= MAX_PARTITION_BYTES:
            raise ValueError(f"substring_dedup.partition_bytes must be in [1, {MAX_PARTITION_BYTES}]")
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: Config) -> SubstringDedup | None:
        return cls(cfg) if cfg.enabled else None

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        text = batch.column("text").cast(pa.large_string())
        return pa.table({"id": batch.column("id"), "text": text})

    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        done = workdir / "spans.done"
        if done.exists():
            return DROPS_SCHEMA.empty_table()
        names = [f.name for f in key_files]
        if len(set(names)) != len(names):
            raise ValueError("substring_dedup: key files must have distinct names (spans are kept per file)")
        plans = plan_partitions(key_files, self.cfg.partition_bytes, workdir / "plan", executor)
        files = [str(f) for f in key_files]
        parts = map_with(
            executor,
            build_partition,
            [(files, p, workdir / "text" / f"{b:05d}") for b, p in enumerate(plans)],
            "substring_dedup partitions",
        )
        k = len(parts)
        pairs = [(a, b) for b in range(k) for a in range(b + 1)]
        spans = map_with(
            executor,
            pair_spans,
            [
                (parts[a], parts[b], self.cfg.min_length, workdir / "pairs" / f"{a:05d}-{b:05d}.npy")
                for a, b in pairs
            ],
            "substring_dedup suffix arrays",
        )
        by_b: dict[int, list[Path]] = {}
        for (_, b), s in zip(pairs, spans, strict=True):
            by_b.setdefault(b, []).append(s)
        written = map_with(
            executor,
            partition_spans,
            [(parts[b], by_b[b], workdir / "spans" / f"{b:05d}") for b in range(k)],
            "substring_dedup spans",
        )
        # each key file's spans: the pieces that the partitions holding its documents found
        by_file: dict[int, list[Path]] = {f: [] for f in range(len(key_files))}
        for b, fs in enumerate(written):
            for f in fs:
                by_file[f].append(workdir / "spans" / f"{b:05d}" / f"{f:06d}.parquet")
        map_with(
            executor,
            file_spans,
            [(by_file[f], spans_file(workdir, key_files[f])) for f in range(len(key_files))],
            "substring_dedup spans per input part",
        )
        atomic_write_json(done, {"key_files": names})
        return DROPS_SCHEMA.empty_table()

    def rewriter(self, resolved: Path, key_file: Path) -> Mapper:
        return CutSpans(spans_file(resolved, key_file))


def spans_file(resolved: Path, key_file: Path) -> Path:
    """Where ``resolve`` writes the spans of the documents whose keys were ``key_file`` (an input part)."""
    return resolved / "by_part" / key_file.name


def plan_partitions(
    key_files: Sequence[Path],
    partition_bytes: int,
    out: Path,
    executor: Executor | None = None,
    run_rows: int = RUN_ROWS,
    block_rows: int = BLOCK_ROWS,
    fan_in: int = FAN_IN,
) -> list[Path]:
    """Every document (id, key file, row, bytes) in (id, key file, row) order, cut into partitions of
    at most ``partition_bytes`` of text (a longer document alone); one plan file per partition.

    An external sort, so that no process holds a row per document of the run: each key file's rows
    are sorted in runs of ``run_rows`` (a task each), groups of ``fan_in`` runs are merged into one
    (tasks, level by level) until at most ``fan_in`` are left, and this process merges those,
    ``block_rows`` rows of each at a time, cutting the partitions as the rows stream by."""
    done = out / "plan.json"
    if not done.exists():
        runs = map_with(
            executor,
            sort_runs,
            [(str(p), f, out / "runs" / f"{f:06d}", run_rows, block_rows) for f, p in enumerate(key_files)],
            "substring_dedup plan: sorted runs",
        )
        level = [r for rs in runs for r in rs]
        depth = 0
        while len(level) > fan_in:
            groups = [level[g : g + fan_in] for g in range(0, len(level), fan_in)]
            level = map_with(
                executor,
                merge_runs,
                [
                    (g, out / "merged" / f"{depth:02d}-{j:06d}.arrow", block_rows)
                    for j, g in enumerate(groups)
                ],
                "substring_dedup plan: merged runs",
            )
            depth += 1
        n = cut_partitions(level, partition_bytes, out)
        atomic_write_json(done, {"partitions": n})
        fault_point("substring_dedup plan")
        for d in ("runs", "merged"):  # nothing reads them once the plan is whole
            shutil.rmtree(out / d, ignore_errors=True)
    n = int(json.loads(done.read_text())["partitions"])
    return [out / f"{b:05d}.parquet" for b in range(n)]


def _compact(pieces: list[pa.Table]) -> pa.Table:
    """``pieces`` as one table of its own buffers: a slice of a run's batch holds the whole batch."""
    return pa.concat_tables(pieces).combine_chunks()


def _write_run(path: Path, blocks: Iterable[pa.Table], block_rows: int) -> None:
    """Sorted plan rows as one Arrow IPC file of ``block_rows``-row batches, by atomic rename
    (uncompressed: ~70 bytes a document, small beside the key files' text, read back at once)."""
    with atomic_path(path) as tmp, pa.ipc.new_file(str(tmp), PLAN_SCHEMA) as w:
        pending: list[pa.Table] = []
        rows = 0
        for t in blocks:
            pending.append(t)
            rows += t.num_rows
            if rows >= block_rows:
                joined = pa.concat_tables(pending).combine_chunks()
                full = rows - rows % block_rows
                w.write_table(joined.slice(0, full), max_chunksize=block_rows)
                pending, rows = [joined.slice(full)], rows - full
            elif len(pending) >= COMPACT_PIECES:
                pending = [_compact(pending)]
        if rows:
            w.write_table(pa.concat_tables(pending), max_chunksize=block_rows)


def sort_runs(key_file: str, f: int, out: Path, run_rows: int, block_rows: int) -> list[str]:
    """Key file ``f``'s plan rows (id, file, row, bytes of text), sorted by (id, row) in runs of at
    most ``run_rows`` rows (``out-<n>.arrow``); returns their paths."""
    done = out.with_suffix(".json")
    if done.exists():
        return [str(out.parent / r) for r in json.loads(done.read_text())["runs"]]
    runs: list[str] = []

    def flush(t: pa.Table) -> None:
        p = out.parent / f"{out.name}-{len(runs):05d}.arrow"
        _write_run(p, [t.sort_by("id")], block_rows)  # a stable sort: rows ascend within an id
        runs.append(p.name)

    pending: list[pa.Table] = []
    rows = at = 0
    with open_parquet(key_file) as pf:
        # a row group at a time (one coalesced batch of a curate worker): ``iter_batches`` keeps
        # ~5 bytes a row of the id column alive until the file object goes (pyarrow 26)
        for g in range(pf.num_row_groups):
            batch = pf.read_row_group(g, columns=["id", "text"])
            n = batch.num_rows
            pending.append(
                pa.table(
                    [
                        batch.column("id").cast(pa.string()),
                        pa.array(np.full(n, f, np.int32)),
                        pa.array(np.arange(at, at + n, dtype=np.int64)),
                        pc.binary_length(batch.column("text")).cast(pa.int64()),
                    ],
                    schema=PLAN_SCHEMA,
                )
            )
            at += n
            rows += n
            while rows >= run_rows:
                joined = pa.concat_tables(pending)
                flush(joined.slice(0, run_rows))
                pending, rows = [joined.slice(run_rows)], rows - run_rows
    if rows:
        flush(pa.concat_tables(pending))
    atomic_write_json(done, {"runs": runs})
    fault_point(f"substring_dedup runs {f:06d}")
    return [str(out.parent / r) for r in runs]


class _Run:
    """One sorted run read a batch at a time: rows ``at:`` of ``buf`` are its next rows not yet
    merged (``buf`` None: no more); ``ids`` are the batch's ids as Python strings, whose order (code
    points) is Arrow's (UTF-8 bytes), to bisect."""

    def __init__(self, path: str) -> None:
        self.file = pa.OSFile(path)
        self.reader = pa.ipc.open_file(self.file)
        self.next = 0
        self.refill()

    def refill(self) -> None:
        self.buf: pa.Table | None = None
        self.at = 0
        while self.buf is None and self.next < self.reader.num_record_batches:
            b = self.reader.get_batch(self.next)
            self.next += 1
            if b.num_rows:
                self.buf = pa.Table.from_batches([b])
                self.ids: list[str] = b.column("id").to_pylist()
                self.files = b.column("file").to_numpy()
                self.rows = b.column("row").to_numpy()
        if self.buf is None:
            self.file.close()

    def last(self) -> tuple[str, int, int]:
        return (self.ids[-1], int(self.files[-1]), int(self.rows[-1]))

    def take(self, bound: tuple[str, int, int]) -> pa.Table:
        """Its next rows up to ``bound`` in (id, file, row) order; refills once the batch is used up."""
        assert self.buf is not None
        bid, bfile, brow = bound
        end = bisect.bisect_left(self.ids, bid, self.at)
        while (
            end < len(self.ids)
            and self.ids[end] == bid
            and (self.files[end], self.rows[end]) <= (bfile, brow)
        ):
            end += 1
        got = self.buf.slice(self.at, end - self.at)
        self.at = end
        if end == len(self.ids):
            self.refill()
        return got


def merged(runs: Sequence[str]) -> Iterator[pa.Table]:
    """The rows of sorted runs in (id, file, row) order, a block at a time: each step takes, from
    every run's buffered batch, the rows up to the smallest last row of those batches (every row
    after it in any run is larger), and sorts them. Memory: one batch per run and one block.

    ``runs`` must come in (file, row) order (every row of a run before every row of the next, as
    ``sort_runs`` makes them and ``merge_runs`` keeps them): then a stable sort by id alone of
    the rows taken, in run order, is their (id, file, row) order."""
    live = [r for r in (_Run(p) for p in runs) if r.buf is not None]
    while live:
        bound = min(r.last() for r in live)  # str order (code points) is Arrow's (UTF-8 bytes)
        taken = [t for t in (r.take(bound) for r in live) if t.num_rows]
        live = [r for r in live if r.buf is not None]
        yield pa.concat_tables(taken).sort_by("id") if len(taken) > 1 else taken[0]


def merge_runs(runs: Sequence[str], out: Path, block_rows: int) -> str:
    """Sorted runs merged into one (a task of the plan's external sort)."""
    if not out.exists():
        _write_run(out, merged(runs), block_rows)
    return str(out)


def cut_partitions(runs: Sequence[str], partition_bytes: int, out: Path) -> int:
    """Merge the sorted runs and cut them into partitions of at most ``partition_bytes`` (with a
    separator after each document; a longer document alone): plan files ``out/<b>.parquet`` (id,
    file, row), each written as its rows stream by; returns how many."""
    b = 0
    acc = 0  # bytes of partition b so far (0: no document yet)
    writer: AtomicParquetWriter | None = None
    pending: list[pa.Table] = []  # partition b's rows not yet written (up to a row group)

    def flush() -> None:
        nonlocal writer
        if writer is None:
            writer = AtomicParquetWriter(out / f"{b:05d}.parquet", PARTITION_SCHEMA)
        if pending:
            writer.write(pa.concat_tables(pending).select(PARTITION_SCHEMA.names))
            pending.clear()

    try:
        for block in merged(runs):
            size = block["bytes"].to_numpy() + 1  # a separator after each document
            if int(size.max()) - 1 > MAX_PARTITION_BYTES:
                raise InputError(
                    f"substring_dedup: a document of {int(size.max()) - 1} bytes is over the suffix-array limit"
                )
            cum = np.cumsum(size)
            i = 0
            while i < len(size):  # one step per partition cut (not per document)
                base = int(cum[i - 1]) if i else 0
                # the first document that would take partition b over partition_bytes
                j = int(np.searchsorted(cum, partition_bytes - acc + base, side="right"))
                if acc == 0:  # a partition's first document goes in, whatever its size
                    j = max(j, i + 1)
                end = min(j, len(size))
                if end > i:
                    pending.append(block.slice(i, end - i))
                    acc += int(cum[end - 1]) - base
                    if sum(t.num_rows for t in pending) >= PLAN_ROW_GROUP:
                        flush()
                    elif len(pending) >= COMPACT_PIECES:
                        pending[:] = [_compact(pending)]
                i = end
                if j < len(size):  # document j starts partition b + 1
                    flush()
                    assert writer is not None
                    writer.commit()
                    writer, b, acc = None, b + 1, 0
        if acc:
            flush()
            assert writer is not None
            writer.commit()
            writer, b = None, b + 1
    finally:
        if writer is not None:
            writer.abort()
    return b


def build_partition(key_files: Sequence[str], plan: Path, out: Path) -> Path:
    """A partition's text: its documents in plan order joined by 0xFF (``out.bin``), and where each
    starts (``out.parquet``: id, key file, start, bytes)."""
    docs_file, text_file = out.with_suffix(".parquet"), out.with_suffix(".bin")
    if docs_file.exists():
        return out
    p = read_parquet(plan)
    files, rows = p["file"].to_numpy(), p["row"].to_numpy()
    pieces = []
    order = []
    for f in np.unique(files).tolist():
        sel = np.flatnonzero(files == f)
        col = read_parquet(key_files[f], columns=["text"])["text"].combine_chunks()
        pieces.append(col.take(pa.array(rows[sel])))
        order.append(sel)
    joined = pa.concat_arrays(pieces).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
    offsets, data = string_buffers(joined)
    lengths = np.diff(offsets)
    # documents joined by one separator each: bytes of document j move right by j
    raw = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]]
    buf = np.insert(raw, offsets[1:-1] - offsets[0], SEP) if len(p) > 1 else raw
    starts = offsets[:-1] - offsets[0] + np.arange(len(p))
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(text_file) as tmp:
        tmp.write_bytes(buf.tobytes())
    starts, lengths = pa.array(starts.astype(np.int64)), pa.array(lengths.astype(np.int64))
    table = {"id": p["id"], "file": p["file"], "start": starts, "bytes": lengths}
    write_table_atomic(docs_file, pa.table(table))
    return out


def pair_spans(a: Path, b: Path, min_length: int, out: Path) -> Path:
    """The repeated spans of partition ``b`` against ``a`` and itself (``a == b``: itself only), in
    ``b``'s coordinates, as an int64 array of (start, end) pairs."""
    if out.exists():
        return out
    tb = np.fromfile(b.with_suffix(".bin"), np.uint8)
    if a == b:
        text, start = tb, 0
    else:
        ta = np.fromfile(a.with_suffix(".bin"), np.uint8)
        text = np.concatenate([ta, np.array([SEP], np.uint8), tb])
        start = len(ta) + 1
        del ta
    spans = np.frombuffer(memoryview(_core.repeated_spans(text, start, min_length)), np.int64)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, open(tmp, "wb") as fh:
        np.save(fh, spans)
    fault_point(f"substring_dedup pair {out.stem}")
    return out


def merge_spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[starts, ends)``: disjoint, sorted, touching ones joined."""
    if len(starts) == 0:
        return starts, ends
    order = np.lexsort((ends, starts))
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    groups = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s), np.int64)
    np.maximum.at(out_e, groups, e)
    return out_s, out_e


def partition_spans(part: Path, pairs: Sequence[Path], out: Path) -> list[int]:
    """Partition ``b``'s repeated spans (the union over its pairs) per document: (id, start, end)
    byte offsets in the document, trimmed to whole UTF-8 characters, written per key file of the
    documents (``out/<file>.parquet``, in plan order); returns those key files' indices."""
    done = out.with_suffix(".json")
    if done.exists():
        return [int(f) for f in json.loads(done.read_text())["files"]]
    flat = [np.load(p).reshape(-1, 2) for p in pairs]
    both = np.concatenate(flat) if flat else np.zeros((0, 2), np.int64)
    s, e = merge_spans(both[:, 0], both[:, 1])
    docs = read_parquet(part.with_suffix(".parquet"))
    text = np.fromfile(part.with_suffix(".bin"), np.uint8)
    cont = np.append((text & 0xC0) == 0x80, False)  # a UTF-8 continuation byte (never a boundary)
    for _ in range(3):  # a character has at most 3 continuation bytes
        s = np.where(cont[s] & (s < e), s + 1, s)
        e = np.where(cont[e] & (e > s), e - 1, e)
    keep = s < e
    s, e = s[keep], e[keep]
    starts = docs["start"].to_numpy()
    j = np.searchsorted(starts, s, side="right") - 1
    ids = docs["id"].take(pa.array(j)) if len(j) else pa.array([], pa.string())
    base = starts[j] if len(j) else np.zeros(0, np.int64)
    found = pa.table({"id": ids, "start": s - base, "end": e - base}, schema=SPANS_SCHEMA)
    file = docs["file"].to_numpy()[j] if len(j) else np.zeros(0, np.int32)
    files = np.unique(file).tolist()
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        write_table_atomic(out / f"{f:06d}.parquet", found.filter(pa.array(file == f)))
    atomic_write_json(done, {"files": files})
    return [int(f) for f in files]


def file_spans(pieces: Sequence[Path], out: Path) -> Path:
    """One key file's spans, sorted by (id, start): the pieces of the partitions holding its
    documents (a document is in one partition: its spans are already disjoint)."""
    if out.exists():
        return out
    tables = [read_parquet(p) for p in pieces]
    found = pa.concat_tables(tables) if tables else SPANS_SCHEMA.empty_table()
    write_table_atomic(out, found.sort_by([("id", "ascending"), ("start", "ascending")]))
    return out


@lru_cache(maxsize=2)
def _load_spans(path: str) -> pa.Table:
    return read_parquet(path)


class CutSpans(Mapper):
    """The rewrite of ``substring_dedup``: each document without its repeated spans."""

    name: ClassVar[str] = SubstringDedup.name
    removed_words_counter: ClassVar[str | None] = "words_removed"

    @dataclass
    class Config:  # built by SubstringDedup, never from YAML
        enabled: bool = False

    def __init__(self, spans: Path) -> None:
        self.spans = spans

    @classmethod
    def from_config(cls, cfg: Config) -> None:
        return None

    def map(self, batch: pa.RecordBatch) -> Mapped:
        spans = _load_spans(str(self.spans))
        ids = batch.column("id")
        mine = spans.filter(pc.is_in(spans["id"], value_set=ids)) if spans.num_rows else spans
        if mine.num_rows == 0:
            return Mapped(batch, 0)
        doc = pc.index_in(mine["id"], value_set=ids).to_numpy()
        starts, ends = mine["start"].to_numpy(), mine["end"].to_numpy()
        text = batch.column("text")
        new = text.to_pylist()
        removed = 0
        for i in np.unique(doc).tolist():
            sel = np.flatnonzero(doc == i)
            raw = new[i].encode()
            keep, at = [], 0
            for s, e in zip(starts[sel].tolist(), ends[sel].tolist(), strict=True):
                keep.append(raw[at:s])
                removed += e - s
                at = e
            keep.append(raw[at:])
            new[i] = b"".join(keep).decode()
        idx = batch.schema.get_field_index("text")
        counters = Counter({"spans_removed": mine.num_rows, "bytes_removed": removed})
        out = batch.set_column(idx, "text", pa.array(new, text.type))
        return Mapped(out, len(np.unique(doc)), counters=counters)
