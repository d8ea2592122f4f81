"""JSON Lines (plain, .gz, .zst, .bz2): one document per line with a text field and an optional id."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import BinaryIO

import zstandard

from llmpipe.io.chunks import Span
from llmpipe.io.compression import compression_of, open_binary
from llmpipe.io.fs import InputPath
from llmpipe.io.members import open_range
from llmpipe.io.records import Bad, Doc


def read_jsonl(
    path: InputPath,
    text_field: str = "text",
    id_field: str = "id",
    max_doc_bytes: int = 20_000_000,
    span: Span | None = None,
) -> Iterator[Doc | Bad]:
    """The records of ``path`` (of its byte range ``span``: a plain file cut at line boundaries, or
    gzip members that start lines).
    A document's position is its line's index in the file."""
    # A line may hold escapes (ASCII-only JSON doubles CJK text); longer lines are never held whole.
    limit = 2 * max_doc_bytes + 65536
    lineno = span.first if span is not None else 0
    # a span of a gzip file is a range of whole members, read to its end; of a plain file, bytes
    members = span is not None and compression_of(path) == "gzip"
    left = span.end - span.start if span is not None and not members else -1  # bytes still to read
    try:
        with (
            open_range(path, span.start, span.end) if span is not None and members else open_binary(path) as f
        ):
            if span is not None and not members:
                f.seek(span.start)
            while left != 0 and (raw := f.readline(limit + 1)):
                left -= len(raw) if left > 0 else 0
                lineno += 1
                if len(raw) > limit and not raw.endswith(b"\n"):
                    skipped = _skip_line(f)
                    left -= skipped if left > 0 else 0
                    size = len(raw) + skipped
                    yield Bad(
                        "document_too_large",
                        f"line {lineno}",
                        f"a line of {size} bytes",
                        raw[:200].decode("latin-1"),
                    )
                    continue
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield Bad("undecodable_bytes", f"line {lineno}", str(e), raw[:200].decode("latin-1"))
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    yield Bad("invalid_json", f"line {lineno}", str(e), line[:200])
                    continue
                if not isinstance(obj, dict):
                    yield Bad("not_an_object", f"line {lineno}", type(obj).__name__, line[:200])
                    continue
                text = obj.get(text_field)
                if text is None:
                    yield Bad("missing_text_field", f"line {lineno}", f"no {text_field!r} key", line[:200])
                    continue
                if not isinstance(text, str):
                    yield Bad("text_not_a_string", f"line {lineno}", type(text).__name__, line[:200])
                    continue
                doc_id = obj.get(id_field)
                meta = {k: v for k, v in obj.items() if k not in (text_field, id_field)}
                yield Doc(
                    None if doc_id is None else str(doc_id),
                    text,
                    meta,
                    location=f"line {lineno}",
                    position=lineno - 1,
                )
    except (EOFError, zlib.error, OSError, zstandard.ZstdError) as e:
        # a truncated or corrupt compressed stream: what was read so far is kept
        yield Bad("truncated_or_corrupt_stream", f"after line {lineno}", f"{type(e).__name__}: {e}")


def _skip_line(f: BinaryIO) -> int:
    """Consume the rest of an over-long line in bounded chunks; returns the bytes skipped."""
    n = 0
    while chunk := f.readline(1 << 20):
        n += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return n
