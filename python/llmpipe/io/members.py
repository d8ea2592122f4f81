"""Gzip members as cut points: a file written as many gzip members (a Common Crawl ``.warc.gz``, one
member per record; gzip files joined with ``cat``) can be read from any member on.

``gzip_cuts`` finds the members that start between two records, in one pass that inflates the file
and hands the bytes to a ``Walk`` that knows where records end (WARC/ARC records by their declared
lengths, JSONL lines by their newlines). ``open_range`` reads the members of one byte range.
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import Any, BinaryIO, Protocol

from llmpipe.io.compression import GZIP_MAGIC, compression_of
from llmpipe.io.fs import InputPath

_READ = 1 << 20
_INFLATE_OUT = 1 << 20
#: a gzip member longer than this (and than a chunk) ends the pass: the rest of the file is one chunk.
#: A file compressed as one stream is then recognised without inflating all of it.
LONG_MEMBER = 16 << 20


class Walk(Protocol):
    """Follows records through a decompressed stream fed piece by piece."""

    records: int  # records that ended (WARC/ARC: whose header was read) so far
    pos: int  # bytes fed so far
    broken: bool  # the stream cannot be followed any further

    def between(self) -> bool:
        """The bytes fed so far end with a whole record."""
        ...

    def feed(self, data: bytes) -> None: ...

    def may_end(self) -> bool:
        """The stream may end here (else the file is cut short)."""
        ...


class LineWalk:
    """Lines (JSONL): a record ends with its newline."""

    def __init__(self) -> None:
        self.records = 0
        self.pos = 0
        self.broken = False
        self._last = b"\n"

    def between(self) -> bool:
        return self._last == b"\n"

    def may_end(self) -> bool:
        return True  # a last line without its newline is read as any other

    def feed(self, data: bytes) -> None:
        if data:
            self.records += data.count(b"\n")
            self.pos += len(data)
            self._last = data[-1:]


def gzip_cuts(
    path: InputPath, walk: Walk, chunk_bytes: int, cut_before_trouble: bool = True
) -> list[tuple[int, int, int]]:
    """(byte, records before, decompressed bytes before) at every gzip member that starts between
    records, up to the first member longer than ``max(chunk_bytes, LONG_MEMBER)``.

    Anything wrong (a member cut short or corrupt, a record the walk cannot follow, bytes after the
    last member, the file ending inside a record) ends the cutting before the member of the record
    it is in, so a chunk's reader meets it exactly as a whole-file read does; or, without
    ``cut_before_trouble`` (a reader whose recovery depends on where it started reading), leaves
    the file whole.
    """
    long_member = max(chunk_bytes, LONG_MEMBER)
    cuts: list[tuple[int, int, int]] = []
    member_of_record = 0  # the member the newest record started or ended in
    at, read, buf = 0, 0, b""
    trouble = -1
    with path.open("rb") as f:
        while True:
            if not buf:
                buf = f.read(_READ)
                read += len(buf)
                if not buf:
                    break  # the last member ended with the file
            if buf[:2] != GZIP_MAGIC:
                trouble = at  # bytes after the last member
                break
            if walk.between():
                cuts.append((at, walk.records, walk.pos))
            before = walk.records
            d = zlib.decompressobj(wbits=31)
            full = False  # the last call's output hit its limit: more may be pending
            try:
                while not d.eof:
                    if not buf and not full:
                        buf = f.read(_READ)
                        read += len(buf)
                        if not buf:
                            break
                    out = d.decompress(buf, _INFLATE_OUT)
                    full = len(out) == _INFLATE_OUT
                    buf = d.unused_data if d.eof else d.unconsumed_tail
                    walk.feed(out)
                    if walk.records > before:
                        member_of_record, before = at, walk.records
                    if not d.eof and read - len(buf) - at > long_member:
                        break
            except zlib.error:
                pass
            if not d.eof or walk.broken:
                trouble = min(at, member_of_record)
                break
            at = read - len(buf)
    if trouble < 0 and not walk.may_end():
        trouble = member_of_record  # the file ends inside a record
    if trouble >= 0:
        cuts = [c for c in cuts if c[0] < trouble] if cut_before_trouble else []
    return cuts


def open_range(path: InputPath, start: int, end: int) -> BinaryIO:
    """The bytes ``[start, end)`` of ``path`` as a stream; inflated when the file is gzip (the range
    then starts and ends at members)."""
    gzipped = compression_of(path) == "gzip"
    raw = io.BufferedReader(_Range(path.open("rb"), start, end))
    if gzipped:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw  # type: ignore[return-value]


class _Range(io.RawIOBase):
    """The bytes ``[start, end)`` of a file, as a stream of their own."""

    def __init__(self, f: BinaryIO, start: int, end: int) -> None:
        self.f = f
        self.left = end - start
        f.seek(start)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        want = min(len(b), self.left)
        if want <= 0:
            return 0
        data = self.f.read(want)
        b[: len(data)] = data
        self.left -= len(data)
        return len(data)

    def close(self) -> None:
        self.f.close()
        super().close()
