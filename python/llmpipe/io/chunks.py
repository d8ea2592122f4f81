"""Split one large input into chunks that run (and resume) independently, on any worker.

A chunk of a plain line-based file (JSONL, uncompressed) is a byte range that starts and ends at
line boundaries; a chunk of a Parquet file is a range of row groups; a chunk of a crawl archive
(WARC/WET/WAT, ARC) is a byte range that starts at a record: at a gzip member of a ``.warc.gz``
written one member per record (the Common Crawl convention), or at a record header of a plain
archive. ``first`` is the number of lines (rows, records) before the chunk, so a record's position,
and with it the id of a document without an id of its own, is the same whatever the chunk size.
A gzip JSONL of several members (gzip files joined with ``cat``) is cut between members that start
a line. A JSONL or archive compressed as one gzip stream (or zstd, bzip2) and text files are one
chunk: such a stream cannot be entered in the middle.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.parquet as pq

from llmpipe._core import count_bytes
from llmpipe.io.compression import compression_of
from llmpipe.io.fs import InputPath

_BLOCK = 16 << 20


@dataclass(frozen=True)
class Span:
    """Bytes (JSONL, archives) or row groups (Parquet) ``[start, end)`` of one input; ``first``
    lines/rows/records before. Crawl archives only: ``offset``, decompressed bytes before (for
    locations); ``last``, records before the end (-1: the chunk ends with the file)."""

    start: int
    end: int
    first: int
    offset: int = 0
    last: int = -1


def split(path: InputPath, fmt: str, chunk_bytes: int) -> list[Span | None]:
    """The chunks of ``path``; ``[None]``: the whole file is one chunk."""
    size = path.stat().st_size
    if size <= chunk_bytes:
        return [None]
    if fmt == "jsonl" and compression_of(path) is None:
        return _line_spans(path, size, chunk_bytes)
    if fmt == "jsonl" and compression_of(path) == "gzip":
        from llmpipe.io.members import LineWalk, gzip_cuts

        # a broken stream stays whole: how many lines before the error a reader recovers depends
        # on where it started
        cuts = gzip_cuts(path, LineWalk(), chunk_bytes, cut_before_trouble=False)
        return spans_at(cuts, size, chunk_bytes)
    if fmt == "parquet":
        return _row_group_spans(path, chunk_bytes)
    if fmt in ("warc", "arc"):
        from llmpipe.io.warc import archive_spans

        return archive_spans(path, fmt, chunk_bytes)
    return [None]


def spans_at(cuts: list[tuple[int, int, int]], size: int, chunk_bytes: int) -> list[Span | None]:
    """Chunks of about ``chunk_bytes`` from candidate cuts ``(byte, records before, decompressed
    bytes before)``, in order."""
    spans: list[Span | None] = []
    start, first, offset = 0, 0, 0
    for at, records, inner in cuts:
        if at - start >= chunk_bytes and 0 < at < size:
            spans.append(Span(start, at, first, offset, records))
            start, first, offset = at, records, inner
    if not spans:
        return [None]
    spans.append(Span(start, size, first, offset))
    return spans


def _line_spans(path: InputPath, size: int, chunk_bytes: int) -> list[Span | None]:
    """Cut after the first newline at or past every multiple of ``chunk_bytes``; count lines as we go."""
    spans: list[Span | None] = []
    start, first, lines, pos = 0, 0, 0, 0
    target = chunk_bytes
    buf = bytearray(_BLOCK)  # one buffer, reused: a fresh 16 MiB per read costs more than the count
    with path.open("rb") as f:
        readinto = f.readinto  # type: ignore[attr-defined]  # local and fsspec files have it
        while n := readinto(buf):
            block = memoryview(buf)[:n]
            at = 0
            while pos + n > target:  # a cut falls in this block: at the next newline
                nl = buf.find(b"\n", max(at, target - pos), n)
                if nl < 0:
                    break
                lines += count_bytes(block[at : nl + 1], 10)
                at = nl + 1
                spans.append(Span(start, pos + at, first))
                start, first = pos + at, lines
                target = start + chunk_bytes
            lines += count_bytes(block[at:], 10)
            pos += n
    if start < size:
        spans.append(Span(start, size, first))
    return spans


def _row_group_spans(path: InputPath, chunk_bytes: int) -> list[Span | None]:
    """``ceil(file size / chunk_bytes)`` chunks of whole row groups, as equal as the groups allow in
    uncompressed bytes (a cut after the group that reaches each k-th share of the total)."""
    with path.open("rb") as f:
        meta = pq.ParquetFile(f).metadata
    sizes = [meta.row_group(g).total_byte_size for g in range(meta.num_row_groups)]
    rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    n = min(len(sizes), -(-path.stat().st_size // chunk_bytes))
    total = sum(sizes)
    spans: list[Span | None] = []
    start, first, acc, seen = 0, 0, 0, 0
    for g, (size, count) in enumerate(zip(sizes, rows, strict=True)):
        acc += size
        seen += count
        if len(spans) < n - 1 and acc * n >= total * (len(spans) + 1) and g + 1 < len(sizes):
            spans.append(Span(start, g + 1, first))
            start, first = g + 1, seen
    if start < meta.num_row_groups:
        spans.append(Span(start, meta.num_row_groups, first))
    return spans or [None]
