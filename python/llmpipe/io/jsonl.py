"""JSON Lines (plain, .gz, .zst, .bz2): one document per line with a text field and an optional id.

Two readers with one result: ``read_jsonl`` goes line by line in Python; ``read_jsonl_blocks``
hands blocks of whole lines to the compiled core (``_core.parse_jsonl_block``), which turns every
plain line into Arrow columns in one call and leaves any line it is not sure about to the same
per-line code (``line_record``).
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import zstandard

from llmpipe import _core
from llmpipe.io.chunks import Span
from llmpipe.io.compression import compression_of, open_binary, stream_problem
from llmpipe.io.fs import InputPath
from llmpipe.io.members import open_range
from llmpipe.io.records import Bad, Doc, DocRun

#: a UTF-8 byte order mark
BOM = b"\xef\xbb\xbf"
#: bytes of whole lines handed to the core at a time
BLOCK_BYTES = 4 << 20
#: a decompressing stream is read with the raw reads of ``readline`` (one buffer at a time), so a
#: truncated or corrupt stream yields exactly the lines the line-by-line reader recovers
_RAW_READ = io.DEFAULT_BUFFER_SIZE
_STREAM_ERRORS = (EOFError, zlib.error, OSError, zstandard.ZstdError)


def max_line_bytes(max_doc_bytes: int) -> int:
    """A line may hold escapes (ASCII-only JSON doubles CJK text); longer lines are never held whole."""
    return 2 * max_doc_bytes + 65536


def line_record(raw: bytes, lineno: int, text_field: str, id_field: str) -> Doc | Bad | None:
    """The record of one line (1-based ``lineno``, bytes with or without the newline); None if blank.
    The file's first line may start with a UTF-8 byte order mark (Windows tools write one)."""
    if lineno == 1 and raw.startswith(BOM):
        raw = raw[len(BOM) :]
    if not raw.strip():
        return None
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Bad("undecodable_bytes", f"line {lineno}", str(e), raw[:200].decode("latin-1"))
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as e:  # JSONDecodeError; an int over 4300 digits; deep nesting
        return Bad("invalid_json", f"line {lineno}", str(e), line[:200])
    if not isinstance(obj, dict):
        return Bad("not_an_object", f"line {lineno}", type(obj).__name__, line[:200])
    if text_field not in obj:
        return Bad("missing_text_field", f"line {lineno}", f"no {text_field!r} key", line[:200])
    text = obj[text_field]
    if text is None:
        return Bad("text_not_a_string", f"line {lineno}", f"{text_field!r} is null", line[:200])
    if not isinstance(text, str):
        return Bad("text_not_a_string", f"line {lineno}", type(text).__name__, line[:200])
    doc_id = obj.get(id_field)
    meta = {k: v for k, v in obj.items() if k not in (text_field, id_field)}
    return Doc(
        None if doc_id is None else str(doc_id),
        text,
        meta,
        location=f"line {lineno}",
        position=lineno - 1,
    )


def _too_large(lineno: int, size: int, head: bytes) -> Bad:
    return Bad(
        "document_too_large", f"line {lineno}", f"a line of {size} bytes", head[:200].decode("latin-1")
    )


def _open(path: InputPath, span: Span | None) -> tuple[BinaryIO, int, bool]:
    """The stream of ``path`` (of its ``span``), the bytes to read from it (-1: to its end) and
    whether it is decompressed."""
    kind = compression_of(path)
    # a span of a gzip file is a range of whole members, read to its end; of a plain file, bytes
    if span is not None and kind == "gzip":
        return open_range(path, span.start, span.end), -1, True
    f = open_binary(path)
    if span is not None:
        f.seek(span.start)
        return f, span.end - span.start, kind is not None
    return f, -1, kind is not None


def read_jsonl(
    path: InputPath,
    text_field: str = "text",
    id_field: str = "id",
    max_doc_bytes: int = 20_000_000,
    span: Span | None = None,
) -> Iterator[Doc | Bad]:
    """The records of ``path`` (of its byte range ``span``: a plain file cut at line boundaries, or
    gzip members that start lines), line by line.
    A document's position is its line's index in the file."""
    limit = max_line_bytes(max_doc_bytes)
    lineno = span.first if span is not None else 0
    try:
        f, left, _ = _open(path, span)
        with f:
            while left != 0 and (raw := f.readline(limit + 1)):
                left -= len(raw) if left > 0 else 0
                lineno += 1
                if len(raw) > limit and not raw.endswith(b"\n"):
                    skipped = _skip_line(f)
                    left -= skipped if left > 0 else 0
                    yield _too_large(lineno, len(raw) + skipped, raw)
                    continue
                if (rec := line_record(raw, lineno, text_field, id_field)) is not None:
                    yield rec
    except _STREAM_ERRORS as e:
        # a truncated or corrupt compressed stream: what was read so far is kept
        yield Bad("truncated_or_corrupt_stream", f"after line {lineno}", stream_problem(e))


def _skip_line(f: BinaryIO) -> int:
    """Consume the rest of an over-long line in bounded chunks; returns the bytes skipped."""
    n = 0
    while chunk := f.readline(1 << 20):
        n += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return n


def read_jsonl_blocks(
    path: InputPath,
    text_field: str = "text",
    id_field: str = "id",
    max_doc_bytes: int = 20_000_000,
    span: Span | None = None,
    block_bytes: int = BLOCK_BYTES,
    id_prefix: str = "",
) -> Iterator[Doc | Bad | DocRun]:
    """The records of ``read_jsonl``, in the same order, with the documents of plain lines in runs
    (``DocRun``, ids prefixed with ``id_prefix``), read ``block_bytes`` at a time. Holds one block
    (a longer line: up to ``max_line_bytes``) at a time."""
    lines = _Lines(text_field, id_field, max_doc_bytes, id_prefix, span.first if span is not None else 0)
    try:
        f, left, decompressed = _open(path, span)
        with f:
            for data in _pieces(f, left, block_bytes, decompressed):
                yield from lines.feed(data)
            yield from lines.end()
    except _STREAM_ERRORS as e:
        yield Bad("truncated_or_corrupt_stream", f"after line {lines.lineno}", stream_problem(e))


def _pieces(f: BinaryIO, left: int, block_bytes: int, decompressed: bool) -> Iterator[bytes]:
    """The bytes of ``f`` (``left`` of them; -1: all) in pieces of about ``block_bytes``. A
    decompressed stream is read as ``readline`` reads it; what was read before an error comes
    out before the error."""
    while left != 0:
        want = block_bytes if left < 0 else min(block_bytes, left)
        if decompressed:
            parts: list[bytes] = []
            got = 0
            while got < want:
                try:
                    part = f.read1(_RAW_READ)  # type: ignore[attr-defined]
                except Exception:
                    if parts:
                        yield b"".join(parts)
                    raise
                if not part:
                    break
                parts.append(part)
                got += len(part)
            data = b"".join(parts)
        else:
            data = f.read(want)
        if not data:
            return
        left -= len(data) if left > 0 else 0
        yield data


class _Lines:
    """Cuts the stream's pieces into blocks of whole lines and reads them; a line longer than
    ``max_line_bytes`` is skipped (never held) and reported as ``document_too_large``."""

    def __init__(
        self, text_field: str, id_field: str, max_doc_bytes: int, id_prefix: str, first: int
    ) -> None:
        self.text_field, self.id_field, self.id_prefix = text_field, id_field, id_prefix
        self.max_doc_bytes = max_doc_bytes
        self.limit = max_line_bytes(max_doc_bytes)
        self.lineno = first  # lines read (an over-long one counts from its start)
        self.pending: list[bytes] = []  # a line begun, not ended
        self.pending_bytes = 0
        self.skipping: tuple[bytes, int] | None = None  # an over-long line: its head and bytes so far

    def feed(self, data: bytes) -> Iterator[Doc | Bad | DocRun]:
        if self.skipping is not None:
            head, size = self.skipping
            nl = data.find(b"\n")
            if nl < 0:
                self.skipping = (head, size + len(data))
                return
            self.skipping = None
            yield _too_large(self.lineno, size + nl + 1, head)
            data = data[nl + 1 :]
        nl = data.rfind(b"\n")
        if nl < 0:
            self.pending.append(data)
            self.pending_bytes += len(data)
        else:
            block = b"".join([*self.pending, data[: nl + 1]]) if self.pending else data[: nl + 1]
            rest = data[nl + 1 :]
            self.pending, self.pending_bytes = ([rest], len(rest)) if rest else ([], 0)
            yield from self._block(block)
        if self.pending_bytes > self.limit:  # no newline within the limit: skip the line
            head = b"".join(self.pending)[:200] if len(self.pending[0]) < 200 else self.pending[0][:200]
            self.lineno += 1
            self.skipping = (head, self.pending_bytes)
            self.pending, self.pending_bytes = [], 0

    def end(self) -> Iterator[Doc | Bad | DocRun]:
        """At the end of the stream: the over-long line being skipped, or the last line without a newline."""
        if self.skipping is not None:
            head, size = self.skipping
            self.skipping = None
            yield _too_large(self.lineno, size, head)
        elif self.pending:
            block = b"".join(self.pending)
            self.pending, self.pending_bytes = [], 0
            yield from self._block(block)

    def _block(self, block: bytes) -> Iterator[Doc | Bad | DocRun]:
        first = self.lineno
        pos, t_off, text, i_off, ids, m_off, meta, fallback, n = _core.parse_jsonl_block(
            block, first, self.text_field, self.id_field, self.id_prefix, self.max_doc_bytes, self.limit
        )
        self.lineno += n
        docs = len(pos)
        if not docs and not fallback:
            return
        run = DocRun(
            pa.StringArray.from_buffers(docs, pa.py_buffer(i_off), pa.py_buffer(ids)),
            pa.StringArray.from_buffers(docs, pa.py_buffer(t_off), pa.py_buffer(text)),
            pa.Array.from_buffers(pa.int64(), docs, [None, pa.py_buffer(pos)]),
            pa.StringArray.from_buffers(docs, pa.py_buffer(m_off), pa.py_buffer(meta)),
        )
        done = 0
        for line, start, end, before in fallback:
            if before > done:
                yield _slice(run, done, before)
                done = before
            raw = block[start:end]
            lineno = first + line + 1
            if len(raw) - raw.endswith(b"\n") > self.limit:
                yield _too_large(lineno, len(raw), raw)
            elif (rec := line_record(raw, lineno, self.text_field, self.id_field)) is not None:
                yield rec
        if docs > done:
            yield run if done == 0 else _slice(run, done, docs)


def _slice(run: DocRun, start: int, stop: int) -> DocRun:
    n = stop - start
    return DocRun(
        run.ids.slice(start, n),
        run.texts.slice(start, n),
        run.positions.slice(start, n),
        run.metas.slice(start, n),
    )
