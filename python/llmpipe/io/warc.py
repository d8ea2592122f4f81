"""Crawl archives: WARC (and its WET/WAT flavours) through FastWARC, ARC v1 through a small parser.

Each record of the archive becomes exactly one of:

* a ``Doc``: an HTML response or ``resource`` record (decoded to a string; the extract step takes
  its main text), or a WET ``conversion`` record (already text); metadata keeps the URL, crawl date
  and content type;
* a ``Skip``: a record that holds no document (warcinfo, request, metadata/WAT, revisit, non-HTML or
  non-2xx responses), counted by the read stage as ``skipped_<reason>``;
* a ``Bad``: a record that is cut short or too large (quarantined).

Records stream one at a time; a record's body is read only after its declared length was checked
against ``max_doc_bytes``, so memory is bounded by the largest accepted record, not the file.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType

from llmpipe.errors import InputError
from llmpipe.io.chunks import Span, spans_at
from llmpipe.io.compression import GZIP_MAGIC, compression_of, open_binary, stream_problem
from llmpipe.io.config import ReadConfig
from llmpipe.io.extract import decode, is_html
from llmpipe.io.fs import InputPath
from llmpipe.io.members import gzip_cuts, open_range
from llmpipe.io.records import Bad, Doc, Skip

_SKIPPED_TYPES = {  # keyed by int: the record type enum is not hashable
    int(WarcRecordType.warcinfo): "warcinfo_record",
    int(WarcRecordType.request): "request_record",
    int(WarcRecordType.revisit): "revisit_record",
    int(WarcRecordType.continuation): "continuation_record",
}
_CHUNK = 1 << 20


def read_warc(path: InputPath, cfg: ReadConfig, span: Span | None = None) -> Iterator[Doc | Bad | Skip]:
    """The records of ``path`` (of its chunk ``span``: the records whose header starts in it; those
    are read exactly as in a whole-file read, the last one past the chunk's end if need be)."""
    kind = compression_of(path)
    # FastWARC detects plain, gzip and zstd from the bytes of a file object (from a path it goes by the
    # name); other codecs are decompressed in Python first.
    source: BinaryIO = path.open("rb") if kind in (None, "gzip", "zstd") else open_binary(path)
    last_pos, n = -1, 0
    last = -1  # the number of the chunk's last record (-1: the file's last)
    if span is not None:
        source.seek(span.start)
        n, last = span.first, span.last
    # Each result is held back until the stream goes on past its record: a record whose body is never
    # read (a request, metadata, a too-large page) may be the one the file is cut in, and is then
    # reported once, as cut, instead of as a skip.
    pending: Doc | Bad | Skip | None = None
    with source:
        records = iter(ArchiveIterator(source, record_types=WarcRecordType.any_type, parse_http=False))
        while True:
            try:
                rec = next(records)
            except StopIteration:
                break
            except (OSError, ValueError, EOFError) as e:  # a corrupt or cut stream, in a header or a body
                if pending is not None:
                    yield pending
                yield Bad("truncated_or_corrupt_stream", f"record {n + 1}", stream_problem(e))
                return
            if span is not None and last >= 0 and (rec.stream_pos > span.end or n == last):
                if rec.stream_pos != span.end or n != last:  # the index and FastWARC disagree
                    raise InputError(
                        f"{path}: record {n + 1} at byte {rec.stream_pos} does not start the chunk at "
                        f"byte {span.end} as its index says; curate it whole (a larger --chunk-mb)"
                    )
                if pending is not None:  # the next chunk's first record: this chunk is done
                    yield pending
                return
            if pending is not None:
                yield pending
            n += 1
            last_pos = rec.stream_pos
            if rec.headers.get("Content-Length") is None:  # FastWARC hands out a header cut short
                yield Bad(
                    "truncated_or_corrupt_stream",
                    f"record {n} (byte {last_pos})",
                    "the record header is cut short (no Content-Length)",
                )
                return
            try:
                pending = _warc_record(rec, n, cfg)
            except (OSError, ValueError, EOFError) as e:  # the stream breaks off in the record's body
                yield Bad("truncated_or_corrupt_stream", f"record {n} (byte {last_pos})", stream_problem(e))
                return
    cut, problem = (
        _tail_problem(path, kind, last_pos)
        if last_pos >= 0
        else (False, "no complete WARC record in the file")
    )
    if pending is not None:
        unread = isinstance(pending, Skip) or (
            isinstance(pending, Bad) and pending.reason == "document_too_large"
        )
        if cut and unread:
            # its body was never read: the record the file is cut in
            pending = Bad("truncated_record", f"record {n} (byte {last_pos})", problem or "")
            problem = None
        elif cut and isinstance(pending, Bad) and pending.reason == "truncated_record":
            problem = None  # already reported by the body's length
        yield pending
    if problem:
        yield Bad("truncated_or_corrupt_stream", f"after record {n}", problem)


def _warc_record(rec: WarcRecord, n: int, cfg: ReadConfig) -> Doc | Bad | Skip:
    """Record number ``n`` (from 1) of the file; a document's position is its record index."""
    where = f"record {n} (byte {rec.stream_pos})"
    rtype = rec.record_type
    if int(rtype) in _SKIPPED_TYPES:
        return Skip(_SKIPPED_TYPES[int(rtype)])
    headers = rec.headers
    ctype = headers.get("Content-Type") or ""
    if rtype == WarcRecordType.metadata:
        return Skip("wat_metadata_record" if ctype.startswith("application/json") else "metadata_record")
    if rtype not in (WarcRecordType.response, WarcRecordType.resource, WarcRecordType.conversion):
        return Skip("unknown_record")
    if rec.content_length > cfg.max_doc_bytes:
        return Bad(
            "document_too_large", where, f"{rec.content_length} bytes > max_doc_bytes {cfg.max_doc_bytes}"
        )
    meta = {
        "url": (headers.get("WARC-Target-URI") or "").strip("<>"),
        "date": headers.get("WARC-Date") or "",
    }
    doc_id = (headers.get("WARC-Record-ID") or "").strip("<>") or None
    charset: str | None = None
    if rtype == WarcRecordType.response:
        if not ctype.startswith("application/http"):
            return Skip("non_http_response")
        rec.parse_http()
        status = rec.http_headers.status_code
        if status is None or not 200 <= status < 300:
            return Skip("http_status_not_2xx")
        ctype, charset = rec.http_content_type or "", rec.http_charset
    expected = rec.content_length
    body = rec.reader.read()
    if len(body) < expected:
        return Bad(
            "truncated_record", where, f"{len(body)} of {expected} bytes", body[:200].decode("latin-1")
        )
    meta["content_type"] = ctype.split(";", 1)[0].strip().lower()
    if rtype == WarcRecordType.conversion:
        try:
            text = body.decode("utf-8")
            return Doc(doc_id, text, {**meta, "record": "conversion"}, location=where, position=n - 1)
        except UnicodeDecodeError as e:
            return Bad("undecodable_bytes", where, str(e))
    return _page(doc_id, body, ctype, charset, meta, where, n - 1)


def _page(
    doc_id: str | None,
    body: bytes,
    ctype: str,
    charset: str | None,
    meta: dict[str, str],
    where: str,
    position: int,
) -> Doc | Skip:
    """An HTTP payload: HTML is decoded (its main text is the extract step's job); the rest is skipped."""
    if not is_html(ctype, body):
        return Skip("non_html")
    # raw words: split on ASCII whitespace in the bytes (faster than the str; multi-byte charsets never
    # use those bytes inside a character, so the count differs only by non-ASCII spaces such as NBSP)
    text = decode(body, charset)
    return Doc(doc_id, text, meta, raw_words=len(body.split()), location=where, position=position)


def _tail_problem(path: InputPath, kind: str | None, last_pos: int) -> tuple[bool, str | None]:
    """(is the last record cut short, what is wrong after it): FastWARC stops quietly at a cut."""
    with path.open("rb") as f:
        f.seek(last_pos)
        if kind == "gzip":
            if f.read(2) != GZIP_MAGIC:
                # one gzip member for the whole file: a cut there is only seen when the stream ends
                f.seek(0)
                d = zlib.decompressobj(wbits=31)
                while not d.eof and (chunk := f.read(_CHUNK)):
                    d.decompress(chunk, 0)
                return (False, None) if d.eof else (True, "the gzip stream ends inside the last record")
            f.seek(last_pos)
            d = zlib.decompressobj(wbits=31)
            while not d.eof and (chunk := f.read(_CHUNK)):
                d.decompress(chunk)
            if not d.eof:
                return True, f"the gzip member of the record at byte {last_pos} is cut short"
            rest = d.unused_data + f.read(_CHUNK)
            if rest.strip(b"\0"):
                return False, (
                    f"{len(rest)}+ bytes after the last complete record at byte {last_pos} (truncated gzip member?)"
                )
            return False, None
        if kind is not None:
            return False, None
        head = f.read(1 << 16)
        m = re.search(rb"\r?\n\r?\n", head)
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        if m is None or length is None:
            return True, f"the record header at byte {last_pos} is cut short"
        end = last_pos + m.end() + int(length.group(1))
        size = path.stat().st_size
        if size < end:
            return (
                True,
                f"the record at byte {last_pos} has {size - last_pos - m.end()} of {int(length.group(1))} bytes",
            )
        f.seek(end)
        rest = f.read(_CHUNK)
        if rest.strip():
            return False, (
                f"{len(rest)}+ bytes after the last complete record at byte {end} (truncated record header?)"
            )
    return False, None


# -- ARC v1 --------------------------------------------------------------------------------------

_ARC_HEADER = re.compile(rb"^(\S+) (\S+) (\d{14}) (\S*) (\d+)\s*$")


def read_arc(path: InputPath, cfg: ReadConfig, span: Span | None = None) -> Iterator[Doc | Bad | Skip]:
    """ARC v1 (Internet Archive / early Common Crawl): ``URL IP DATE TYPE LENGTH`` then LENGTH bytes.
    ``span``: only the records of that byte range (it starts and ends at records or gzip members)."""
    n = span.first if span is not None else 0
    offset = span.offset if span is not None else 0
    try:
        with open_binary(path) if span is None else open_range(path, span.start, span.end) as f:
            while True:
                line = f.readline(1 << 16)
                if not line:
                    return
                offset += len(line)
                if not line.strip():
                    continue
                n += 1
                where = f"record {n} (byte {offset - len(line)} uncompressed)"
                m = _ARC_HEADER.match(line)
                if m is None:
                    yield Bad(
                        "invalid_arc_header",
                        where,
                        "expected 'URL IP DATE TYPE LENGTH'",
                        line[:200].decode("latin-1"),
                    )
                    return  # without a valid length the next record cannot be found
                url, date, ctype, length = m.group(1), m.group(3), m.group(4), int(m.group(5))
                if length > cfg.max_doc_bytes:
                    got = _discard(f, length)
                    offset += got
                    yield Bad(
                        "document_too_large", where, f"{length} bytes > max_doc_bytes {cfg.max_doc_bytes}"
                    )
                    if got < length:
                        yield Bad("truncated_record", where, f"{got} of {length} bytes")
                        return
                    continue
                block = f.read(length)
                offset += len(block)
                if len(block) < length:
                    yield Bad(
                        "truncated_record",
                        where,
                        f"{len(block)} of {length} bytes",
                        block[:200].decode("latin-1"),
                    )
                    return
                yield _arc_record(
                    url.decode("latin-1"), date.decode(), ctype.decode("latin-1"), block, n, where, cfg
                )
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        yield Bad("truncated_or_corrupt_stream", f"after record {n}", stream_problem(e))


def _discard(f: BinaryIO, length: int) -> int:
    got = 0
    while got < length and (chunk := f.read(min(_CHUNK, length - got))):
        got += len(chunk)
    return got


def _arc_record(
    url: str, date: str, ctype: str, block: bytes, n: int, where: str, cfg: ReadConfig
) -> Doc | Bad | Skip:
    if url.startswith("filedesc://"):
        return Skip("arc_filedesc_record")
    iso = f"{date[0:4]}-{date[4:6]}-{date[6:8]}T{date[8:10]}:{date[10:12]}:{date[12:14]}Z"
    meta = {"url": url, "date": iso, "content_type": ctype.split(";", 1)[0].strip().lower()}
    charset: str | None = None
    body = block
    if block.startswith(b"HTTP/"):
        split = re.search(rb"\r?\n\r?\n", block)
        head, body = (block[: split.start()], block[split.end() :]) if split else (block, b"")
        status = head.split(None, 2)[1:2]
        if not status or not status[0].isdigit() or not 200 <= int(status[0]) < 300:
            return Skip("http_status_not_2xx")
        ct = re.search(rb"(?im)^content-type:\s*([^\r\n]*)", head)
        if ct:
            ctype = ct.group(1).decode("latin-1")
            cs = re.search(r"(?i)charset=([\w.:-]+)", ctype)
            charset = cs.group(1) if cs else None
            meta["content_type"] = ctype.split(";", 1)[0].strip().lower()
        if body.startswith(GZIP_MAGIC):  # some crawlers kept the encoded payload
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError, zlib.error) as e:
                return Bad("undecodable_bytes", where, f"gzip payload: {e}")
    return _page(None, body, ctype, charset, meta, where, n - 1)


# -- chunks --------------------------------------------------------------------------------------

_SEPARATORS = b" \t\r\n"
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d+)[ \t]*\r?$")
_MAX_HEADER = 1 << 16


class _RecordWalk:
    """Follows the records of an archive's (decompressed) byte stream, fed piece by piece, by their
    declared lengths (a WARC header's Content-Length, an ARC header line's last field): never by
    searching the bodies for something that looks like a header."""

    def __init__(self, fmt: str, keep_headers: bool = False) -> None:
        self.fmt = fmt
        self.keep_headers = keep_headers
        self.records = 0  # complete record headers seen
        self.pos = 0  # stream bytes fed so far
        self.left = 0  # bytes of the current record's body still to come
        self.head = b""  # the start of a header that is not complete yet
        self.start = 0  # stream offset of the newest record's header
        self.broken = False
        self.headers: list[tuple[int, int]] = []  # (stream offset, records before) of each header

    def between(self) -> bool:
        """At a record boundary: the stream fed so far ends with a whole record."""
        return not self.broken and self.left == 0 and not self.head

    def may_end(self) -> bool:
        return self.between()

    def skip(self) -> int:
        """Declare the rest of the current body read without feeding it (a plain file seeks past it)."""
        n, self.left = self.left, 0
        self.pos += n
        return n

    def feed(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n and not self.broken:
            if self.left:
                take = min(self.left, n - i)
                self.left -= take
                i += take
                continue
            if not self.head:
                while i < n and data[i] in _SEPARATORS:
                    i += 1
                if i == n:
                    break
                self.start = self.pos + i
            window = self.head + data[i : i + _MAX_HEADER]
            end = window.find(b"\r\n\r\n" if self.fmt == "warc" else b"\n")
            if end < 0:  # the header goes on in the next piece
                self.head = window
                self.broken = len(window) >= _MAX_HEADER
                i += min(n - i, _MAX_HEADER)
                continue
            sep = 4 if self.fmt == "warc" else 1
            i += end + sep - len(self.head)
            length = self._length(window[:end])
            self.head = b""
            if length is None:
                self.broken = True
                break
            if self.keep_headers:
                self.headers.append((self.start, self.records))
            self.records += 1
            self.left = length
        self.pos += n

    def _length(self, header: bytes) -> int | None:
        if self.fmt == "warc":
            if not header.startswith(b"WARC/"):
                return None
            m = _CONTENT_LENGTH.search(header)
            return int(m.group(1)) if m else None
        arc = _ARC_HEADER.match(header)
        return int(arc.group(5)) if arc else None


def archive_spans(path: InputPath, fmt: str, chunk_bytes: int) -> list[Span | None]:
    """Chunks of about ``chunk_bytes`` of a crawl archive, each starting at a record.

    A gzip file is cut only between gzip members that also lie between records; finding them takes
    one pass that inflates the file (zlib, no parsing beyond the record headers). A plain file is cut
    at record headers, found by seeking over each record's declared length. Anything wrong in the
    file (a cut-short member or record, a header that does not parse, bytes after the last record)
    ends the cutting before the record it is in: that record and all after it stay in the last chunk,
    whose reader reports the problem exactly as a one-chunk read does. A file of one gzip stream, or
    compressed otherwise, is one chunk.
    """
    kind = compression_of(path)
    if kind == "gzip":
        cuts = gzip_cuts(path, _RecordWalk(fmt), chunk_bytes)
    elif kind is None:
        cuts = _plain_cuts(path, fmt)
    else:
        return [None]
    return spans_at(cuts, path.stat().st_size, chunk_bytes)


def _plain_cuts(path: InputPath, fmt: str) -> list[tuple[int, int, int]]:
    """(byte, records before, same byte) at every record header of an uncompressed archive."""
    walk = _RecordWalk(fmt, keep_headers=True)
    cuts: list[tuple[int, int, int]] = []
    size = path.stat().st_size
    with path.open("rb") as f:
        while block := f.read(_MAX_HEADER):
            walk.feed(block)
            cuts += [(at, before, at) for at, before in walk.headers]
            walk.headers.clear()
            if walk.broken:
                break
            if walk.left:
                f.seek(walk.skip(), 1)
    if walk.broken or walk.left or walk.head or walk.pos > size:
        # the newest record is broken or cut short: no cut at or after its header
        cuts = [c for c in cuts if c[0] < walk.start]
    return cuts
