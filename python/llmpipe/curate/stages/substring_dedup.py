"""Exact-substring dedup (Lee et al. 2022, "Deduplicating Training Data Makes Language Models Better").

Every span of at least ``min_length`` bytes that occurs more than once in the run's kept text is
removed from all but its first occurrence (the run's order: documents by id, as ``exact_dedup``,
then by position); a span never crosses documents. It works on UTF-8 bytes, not token ids: the
default of 200 bytes is about the paper's 50 tokens for English with a GPT-2-style BPE (~4 bytes a
token). Removed spans are trimmed to whole characters; documents left without a word are dropped.

How, with bounded memory (``resolve``, each phase a task of the executor, resumable by atomic
outputs): the documents, ordered by id, are cut into partitions of at most ``partition_bytes``;
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

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.executors import Executor, map_with
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalRewrite, Mapped, Mapper, RunContext
from llmpipe.curate.workdir import atomic_path, fault_point, read_parquet, write_table_atomic
from llmpipe.data.format import atomic_write_json
from llmpipe.errors import InputError

SEP = 0xFF
#: one suffix array covers two partitions and their separators (divsufsort's int32 indices)
MAX_PARTITION_BYTES = (2**31 - 1) // 2 - 1
SPANS_SCHEMA = pa.schema([("id", pa.string()), ("start", pa.int64()), ("end", pa.int64())])


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
        plans = plan_partitions(key_files, self.cfg.partition_bytes, workdir / "plan")
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


def plan_partitions(key_files: Sequence[Path], partition_bytes: int, out: Path) -> list[Path]:
    """Every document (id, key file, row, bytes) in id order, cut into partitions of at most
    ``partition_bytes`` of text (a longer document alone); one plan file per partition."""
    tables = []
    for f, path in enumerate(key_files):
        t = read_parquet(path, columns=["id", "text"])
        n = t.num_rows
        tables.append(
            pa.table(
                {
                    "id": t["id"],
                    "file": pa.array(np.full(n, f, np.int32)),
                    "row": pa.array(np.arange(n, dtype=np.int64)),
                    "bytes": pc.binary_length(t["text"]).cast(pa.int64()),
                }
            )
        )
    if not tables:
        return []
    docs = pa.concat_tables(tables).sort_by(
        [("id", "ascending"), ("file", "ascending"), ("row", "ascending")]
    )
    size = docs["bytes"].to_numpy() + 1  # a separator after each document
    if int(size.max()) - 1 > MAX_PARTITION_BYTES:
        raise InputError(
            f"substring_dedup: a document of {int(size.max()) - 1} bytes is over the suffix-array limit"
        )
    bounds = [0]
    acc = 0
    for j, s in enumerate(size.tolist()):  # one pass over documents (not bytes)
        if acc and acc + s > partition_bytes:
            bounds.append(j)
            acc = 0
        acc += s
    bounds.append(len(size))
    plans = []
    for b in range(len(bounds) - 1):
        p = out / f"{b:05d}.parquet"
        if not p.exists():
            write_table_atomic(
                p, docs.slice(bounds[b], bounds[b + 1] - bounds[b]).select(["id", "file", "row"])
            )
        plans.append(p)
    return plans


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
