"""Detect an input's format (by content, then by name) and stream its records.

``read_input`` yields, in input order, Arrow batches of documents (``RAW_SCHEMA``) and, between them,
the records that hold no document (``Skip``) or are bad (``Bad``). Counting them is the read step's
job (``llmpipe.curate.stages.read``); this package only reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmpipe.io.chunks import Span
from llmpipe.io.compression import cut_before_first_block, peek
from llmpipe.io.config import ReadConfig
from llmpipe.io.fs import InputPath
from llmpipe.io.jsonl import BLOCK_BYTES, read_jsonl, read_jsonl_blocks
from llmpipe.io.parquet import read_parquet
from llmpipe.io.records import RAW_SCHEMA, Bad, Doc, DocRun, Skip
from llmpipe.io.text import read_text

#: a batch is handed on at ``batch_size`` documents, at ``max_batch_bytes`` of text, or at this many bytes of HTML: web pages arrive
#: unextracted (tens of KB each, held as bytes, str and Arrow at once), and memory must stay flat
HTML_BATCH_BYTES = 1 << 20


def detect_format(path: InputPath) -> str:
    """One of jsonl, parquet, warc, arc, text, empty, binary, truncated (a compressed stream cut before
    its first block ends: nothing of it can be read)."""
    if path.stat().st_size == 0:
        return "empty"
    with path.open("rb") as f:
        if f.read(4) == b"PAR1":
            return "parquet"
    head = peek(path)
    if not head:
        return "truncated" if cut_before_first_block(path) else "binary"
    stripped = head.lstrip()
    if stripped.startswith(b"WARC/"):
        return "warc"
    if stripped.startswith(b"filedesc://"):
        return "arc"
    if stripped.startswith(b"{"):
        return "jsonl"
    if b"\x00" in head:
        return "binary"
    name = path.name.lower()
    for ext in (".gz", ".zst", ".bz2"):
        name = name.removesuffix(ext)
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "text"


def records(
    path: InputPath, cfg: ReadConfig, span: Span | None = None, *, jsonl_block: int = 0, id_prefix: str = ""
) -> Iterator[Doc | DocRun | Bad | Skip]:
    """Every record of one input (of its chunk ``span``), by its detected format.

    ``jsonl_block`` > 0: JSONL is read that many bytes at a time by the compiled fast path, the
    documents of plain lines in runs (``DocRun``) with ids prefixed by ``id_prefix``; 0: line by line.
    """
    fmt = detect_format(path)
    if fmt == "jsonl" and jsonl_block > 0:
        yield from read_jsonl_blocks(
            path, cfg.text_field, cfg.id_field, cfg.max_doc_bytes, span, jsonl_block, id_prefix
        )
    elif fmt == "jsonl":
        yield from read_jsonl(path, cfg.text_field, cfg.id_field, cfg.max_doc_bytes, span)
    elif fmt == "parquet":
        yield from read_parquet(
            path, cfg.text_field, cfg.id_field, span, cfg.max_doc_bytes, cfg.max_batch_bytes // 4
        )
    elif fmt == "text":
        yield from read_text(path, cfg.max_doc_bytes)
    elif fmt in ("warc", "arc"):
        from llmpipe.io import warc  # FastWARC loads only when a crawl archive is read

        yield from (warc.read_warc if fmt == "warc" else warc.read_arc)(path, cfg, span)
    elif fmt == "empty":
        yield Bad("empty_file", "file", "the file has no bytes")
    elif fmt == "truncated":
        yield Bad(
            "truncated_or_corrupt_stream",
            "file",
            "the file is truncated: the compressed stream ends before its first block is complete",
        )
    else:
        yield Bad(f"unsupported_format_{fmt}", "file", f"detected format {fmt!r}: {_what_binary(peek(path))}")


def _what_binary(head: bytes) -> str:
    """What a file none of the readers takes seems to be, and what to do with it."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (it starts with a UTF-16 byte order mark): convert it to UTF-8 (iconv -f UTF-16)"
    if head[257:262] == b"ustar":
        return "a tar archive: unpack it and name its files or its directory"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive: unpack it and name its files or its directory"
    return "not JSONL, Parquet, WARC/ARC or UTF-8 text (plain, gzip, zstd or bzip2)"


def read_input(
    path: InputPath, source: str, cfg: ReadConfig, span: Span | None = None, *, jsonl_block: int = BLOCK_BYTES
) -> Iterator[pa.RecordBatch | Skip | Bad]:
    """Stream one input (one chunk of it): document batches of ``RAW_SCHEMA``, and its skipped and bad
    records, in order.

    A document's id is ``<source>/<id from the record, or its position>``; a record id seen before in
    the same chunk gets ``#<position>``. Positions are line or row indices where the reader gives
    them (so ids do not depend on the chunk size), else record counts. ``jsonl_block``: see
    ``records`` (0 reads JSONL line by line in Python; the result is the same).
    """
    batch = _Batch(source)
    count = 0
    seen: set[str] = set()
    for rec in records(path, cfg, span, jsonl_block=jsonl_block, id_prefix=f"{source}/"):
        if isinstance(rec, DocRun):
            ids = _unique_ids(rec, seen)
            count += len(rec)
            sizes = np.cumsum(pc.binary_length(rec.texts).to_numpy(zero_copy_only=False), dtype=np.int64)
            at = 0
            while at < len(rec):
                take = min(len(rec) - at, cfg.batch_size - len(batch))
                before = int(sizes[at - 1]) if at else 0
                # the batch ends with the document that brings its texts to max_batch_bytes
                full = int(
                    np.searchsorted(sizes[at : at + take] - before, cfg.max_batch_bytes - batch.text_bytes)
                )
                take = min(take, full + 1)
                batch.add_run(ids, rec, at, take)
                batch.text_bytes += int(sizes[at + take - 1]) - before
                at += take
                if len(batch) >= cfg.batch_size or batch.text_bytes >= cfg.max_batch_bytes:
                    yield batch.take()
            continue
        if not isinstance(rec, Doc):
            yield rec
            continue
        pos = rec.position if rec.position is not None else count
        meta = json.dumps(rec.meta, ensure_ascii=False, sort_keys=True, default=str) if rec.meta else ""
        try:
            size = len(rec.text.encode("utf-8"))
            for s in (rec.id or "", meta):  # an id or metadata Arrow could not hold
                if not s.isascii():
                    s.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates from JSON escapes
            snippet = rec.text[:200].encode("utf-8", "replace").decode()
            yield Bad("undecodable_bytes", rec.location or f"record {pos}", str(e), snippet)
            count += 1
            continue
        if size > cfg.max_doc_bytes:
            where = rec.location or f"record {pos}"
            yield Bad("document_too_large", where, f"{size} bytes > max_doc_bytes {cfg.max_doc_bytes}")
            count += 1
            continue
        doc_id = f"{source}/{rec.id if rec.id is not None else pos}"
        if doc_id in seen:
            doc_id = f"{doc_id}#{pos}"
        seen.add(doc_id)
        batch.add(doc_id, rec, pos, size, meta)
        count += 1
        batch.text_bytes += size
        if (
            len(batch) >= cfg.batch_size
            or batch.html_bytes >= HTML_BATCH_BYTES
            or batch.text_bytes >= cfg.max_batch_bytes
        ):
            yield batch.take()
    if len(batch):
        yield batch.take()


def _unique_ids(run: DocRun, seen: set[str]) -> pa.StringArray:
    """The run's ids, a repeat (of an id earlier in the chunk) with ``#<position>``; adds them to ``seen``."""
    ids = run.ids.to_pylist()
    if len(set(ids)) == len(ids) and seen.isdisjoint(ids):  # the usual case, at C speed
        seen.update(ids)
        return run.ids
    out: list[str] = []
    for doc_id, pos in zip(ids, run.positions.to_pylist(), strict=True):
        if doc_id in seen:
            doc_id = f"{doc_id}#{pos}"
        seen.add(doc_id)
        out.append(doc_id)
    return pa.array(out, pa.string())


class _Batch:
    """The columns of the documents read since the last batch was handed on: Python values of
    documents read one at a time, and Arrow slices of runs."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._reset()
        self.pieces: list[pa.RecordBatch] = []
        self.piece_rows = 0
        self.runs = False  # a piece is a slice of a run
        self.text_bytes = 0  # UTF-8 bytes of the texts in the batch

    def _reset(self) -> None:
        self.ids: list[str] = []
        self.texts: list[str] = []
        self.positions: list[int] = []
        self.metas: list[str] = []
        self.raw_words: list[int] = []
        self.html_bytes = 0

    def __len__(self) -> int:
        return len(self.ids) + self.piece_rows

    def add(self, doc_id: str, rec: Doc, pos: int, size: int, meta: str) -> None:
        """One document (``meta``: its metadata as JSON, "" if none)."""
        self.ids.append(doc_id)
        self.texts.append(rec.text)
        self.positions.append(pos)
        self.metas.append(meta)
        if rec.raw_words is None:
            self.raw_words.append(-1)
        else:
            self.raw_words.append(rec.raw_words)
            self.html_bytes += size

    def add_run(self, ids: pa.StringArray, run: DocRun, start: int, n: int) -> None:
        """Documents ``start:start + n`` of a run (``ids``: its final ids)."""
        self._flush()
        raw_words = pa.array(np.full(n, -1, np.int64))
        texts, positions, metas = (c.slice(start, n) for c in (run.texts, run.positions, run.metas))
        self._piece(ids.slice(start, n), texts, positions, metas, raw_words)
        self.runs = True

    def _flush(self) -> None:
        """The documents added one at a time become a piece."""
        if not self.ids:
            return
        self._piece(
            pa.array(self.ids, pa.string()),
            pa.array(self.texts, pa.string()),
            pa.array(self.positions, pa.int64()),
            pa.array(self.metas, pa.string()),
            pa.array(self.raw_words, pa.int64()),
        )
        self._reset()

    def _piece(
        self, ids: pa.Array, texts: pa.Array, positions: pa.Array, metas: pa.Array, raw: pa.Array
    ) -> None:
        """Documents as one piece of ``RAW_SCHEMA`` (the source column is this input's name)."""
        n = len(ids)
        source = pa.repeat(pa.scalar(self.source, pa.string()), n)
        self.pieces.append(
            pa.RecordBatch.from_arrays([ids, texts, source, positions, metas, raw], schema=RAW_SCHEMA)
        )
        self.piece_rows += n

    def take(self) -> pa.RecordBatch:
        """The batch, its columns in new buffers (a run's slice does not keep its block alive)."""
        self._flush()
        pieces, runs = self.pieces, self.runs
        self.pieces, self.piece_rows, self.runs, self.text_bytes = [], 0, False, 0
        if len(pieces) == 1 and not runs:
            return pieces[0]
        return pa.RecordBatch.from_arrays(
            [pa.concat_arrays([p.column(i) for p in pieces]) for i in range(len(RAW_SCHEMA))],
            schema=RAW_SCHEMA,
        )
