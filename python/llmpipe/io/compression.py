"""Open plain, gzip, zstd or bzip2 files by their magic bytes (not only their names)."""

from __future__ import annotations

import bz2
import gzip
import io
import zlib
from typing import Any, BinaryIO

import zstandard

from llmpipe.io.fs import InputPath

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BZ2_MAGIC = b"BZh"


def compression_of(path: InputPath) -> str | None:
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(BZ2_MAGIC):
        return "bz2"
    return None


def open_binary(path: InputPath) -> BinaryIO:
    """A streaming binary reader that decompresses transparently (a local or a remote file).

    A compressed stream that is cut short (or corrupt) gives every byte decompressed before the cut,
    then raises (``EOFError`` for a cut), so a reader keeps every record that ends before it."""
    kind = compression_of(path)
    raw = path.open("rb")
    if kind == "gzip":
        return decompressed(gzip.GzipFile(fileobj=raw, mode="rb"), raw)
    if kind == "zstd":
        return Decompressed(_ZstdReader(raw))
    if kind == "bz2":
        return decompressed(bz2.BZ2File(raw, "rb"), raw)
    return raw


def decompressed(stream: Any, source: BinaryIO) -> Decompressed:
    """A ``GzipFile`` or ``BZ2File`` over ``source`` as a ``Decompressed`` reader that also closes
    ``source`` (they leave a file object they were given open)."""
    return Decompressed(_Read1(stream), source)


class Decompressed(io.BufferedReader):
    """A buffered reader of a decompressing raw stream whose reads never lose bytes to an error.

    ``io.BufferedReader.read(n)`` (and ``readinto``) gathers raw reads until it has ``n`` bytes and,
    when one raises (the stream is cut short), drops what it gathered: FastWARC's 64 KB reads lost
    the records before a cut. Here such a read returns the bytes before the error and the next read
    raises it. (``readline`` and ``read1`` stop at a newline or after one raw read: what they drop
    is never a whole line.)
    """

    def __init__(self, raw: io.RawIOBase, source: BinaryIO | None = None) -> None:
        super().__init__(raw)
        self.source = source
        self._error: BaseException | None = None

    def _raise(self) -> None:
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def read(self, size: int | None = -1) -> bytes:
        self._raise()
        parts: list[bytes] = []
        got = 0
        while size is None or size < 0 or got < size:
            try:
                part = super().read1(-1 if size is None or size < 0 else size - got)
            except Exception as e:
                if not parts:
                    raise
                self._error = e  # the bytes before it first
                break
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def readinto(self, b: Any) -> int:
        data = self.read(len(memoryview(b).cast("B")))
        n = len(data)
        memoryview(b).cast("B")[:n] = data
        return n

    def read1(self, size: int = -1) -> bytes:
        self._raise()
        return super().read1(size)

    def readline(self, size: int | None = -1) -> bytes:
        self._raise()
        return super().readline(size)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.source is not None:
                self.source.close()


class _Read1(io.RawIOBase):
    """A ``GzipFile`` or ``BZ2File`` as a raw stream: each read hands on what one of its ``read1``
    gives. (Their ``read(n)``, which ``io.BufferedReader`` would call, loops until it has ``n``
    bytes and drops them when the stream then breaks off.)"""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.stream.read1(len(b))
        n = len(data)
        b[:n] = data
        return n

    # positions in the decompressed stream, as the stream keeps them (FastWARC asks for them)
    def seekable(self) -> bool:
        return bool(self.stream.seekable())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self.stream.seek(offset, whence))

    def tell(self) -> int:
        return int(self.stream.tell())

    def close(self) -> None:
        try:
            self.stream.close()
        finally:
            super().close()


#: a zstd block decompresses to at most 128 KiB (the format's limit, enforced by the decoder)
_ZSTD_BLOCK_MAX = 128 << 10
#: blocks are fed to the decoder until they may decompress to this much: a stream of 4-byte RLE
#: blocks (a 32 KB file that inflates to a gigabyte) is decoded a few MB at a time
ZSTD_OUT_BUDGET = 4 << 20
_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


class _ZstdBlocks:
    """Cuts a zstd stream at block boundaries into pieces that each decompress to at most
    ``ZSTD_OUT_BUDGET`` bytes (the frame and block headers say how much each block may hold).
    Skippable frames are passed over; bytes that are not a frame go on as they are (the decoder
    rejects them)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.buf = b""
        self.at = 0
        self.eof = False
        self.frame = False  # inside a frame's blocks
        self.checksum = 0  # bytes of checksum after the frame's last block
        self.taken = 0  # bytes handed on

    def _fill(self, n: int) -> bool:
        """At least ``n`` bytes buffered (False: the stream ends before)."""
        while len(self.buf) - self.at < n and not self.eof:
            chunk = self.raw.read(max(1 << 16, n))
            if not chunk:
                self.eof = True
                break
            self.buf = self.buf[self.at :] + chunk
            self.at = 0
        return len(self.buf) - self.at >= n

    def _take(self, n: int) -> bytes:
        out = self.buf[self.at : self.at + n]
        self.at += len(out)
        self.taken += len(out)
        return out

    def piece(self) -> bytes:
        """The next piece (b"": the stream ended); a stream cut short ends with a partial piece."""
        start = self.taken
        parts: list[bytes] = []
        bound = 0
        while bound < ZSTD_OUT_BUDGET and self.taken - start < (1 << 20):
            if not self.frame:
                if not self._fill(4):
                    parts.append(self._take(4))
                    break
                magic = int.from_bytes(self.buf[self.at : self.at + 4], "little")
                if magic in _ZSTD_SKIPPABLE:
                    self._skip_frame()
                    continue
                if magic != int.from_bytes(ZSTD_MAGIC, "little") or not self._fill(6):
                    parts.append(self._take(1 << 16))  # not a frame (or cut short): the decoder says so
                    break
                fhd = self.buf[self.at + 4]
                single = (fhd >> 5) & 1
                size = 6 - single + (0, 1, 2, 4)[fhd & 3] + (single, 2, 4, 8)[fhd >> 6]
                self.checksum = 4 if fhd & 4 else 0
                if not self._fill(size):
                    parts.append(self._take(size))
                    break
                parts.append(self._take(size))
                self.frame = True
            if not self._fill(3):
                parts.append(self._take(3))
                break
            header = int.from_bytes(self.buf[self.at : self.at + 3], "little")
            kind, n = (header >> 1) & 3, header >> 3
            need = 3 + (1 if kind == 1 else n)  # an RLE block holds one byte, repeated n times
            bound += n if kind != 2 else _ZSTD_BLOCK_MAX
            if not self._fill(need):
                parts.append(self._take(need))
                break
            parts.append(self._take(need))
            if header & 1:  # the frame's last block
                self.frame = False
                if self.checksum:
                    self._fill(self.checksum)
                    parts.append(self._take(self.checksum))
        return b"".join(parts)

    def _skip_frame(self) -> None:
        if not self._fill(8):
            raise EOFError("the zstd stream ends inside a skippable frame (truncated file?)")
        left = int.from_bytes(self.buf[self.at + 4 : self.at + 8], "little")
        self.at += 8
        while left:
            if not self._fill(1):
                raise EOFError("the zstd stream ends inside a skippable frame (truncated file?)")
            n = min(left, len(self.buf) - self.at)
            self.at += n
            left -= n


class _ZstdReader(io.RawIOBase):
    """zstd frames one after another; a stream that ends inside a frame raises ``EOFError``.

    (zstandard's own stream reader ends quietly at a cut, so a truncated file would read as shorter.)
    The decoder is fed a few blocks at a time (``_ZstdBlocks``), so what it returns at once is bounded.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.blocks = _ZstdBlocks(raw)
        self.dec = zstandard.ZstdDecompressor().decompressobj()
        self.started = False  # bytes of the current frame were fed
        self.buf = b""
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self.pos == len(self.buf):
            self.buf, self.pos = b"", 0
            chunk = self.blocks.piece()
            if not chunk:
                if self.started:
                    raise EOFError("the zstd stream ends inside a frame (truncated file?)")
                return 0
            while chunk:
                self.started = True
                self.buf += self.dec.decompress(chunk)
                chunk = b""
                if self.dec.eof:  # a frame ended: the rest belongs to the next one
                    chunk = self.dec.unused_data
                    self.dec = zstandard.ZstdDecompressor().decompressobj()
                    self.started = False
        n = min(len(b), len(self.buf) - self.pos)
        b[:n] = self.buf[self.pos : self.pos + n]
        self.pos += n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def stream_problem(e: BaseException) -> str:
    """A quarantine record's detail for a stream that broke off: says so when the file is cut short."""
    kind = (
        type(e).__name__ if type(e).__module__ == "builtins" else f"{type(e).__module__}.{type(e).__name__}"
    )
    if isinstance(e, EOFError) or (
        isinstance(e, OSError) and str(e) == "incomplete frame"
    ):  # FastWARC's zstd
        return f"the file is truncated ({kind}: {e})"
    return f"{kind}: {e}"


def peek(path: InputPath, n: int = 4096) -> bytes:
    """The first ``n`` decompressed bytes, or as many as a truncated stream holds (empty if unreadable)."""
    try:
        kind = compression_of(path)
        with path.open("rb") as f:
            head = f.read(max(n, 1 << 16))
        if kind == "gzip":
            return zlib.decompressobj(wbits=31).decompress(head, n)
        if kind == "zstd":
            # through the bounded reader (64 KB of RLE blocks inflate to 2 GB), from the file: a
            # block holds up to 128 KB, so a head of 64 KB may end before the first block does
            with path.open("rb") as f:
                zr, out, buf = _ZstdReader(f), bytearray(), bytearray(n)
                try:
                    while len(out) < n and (k := zr.readinto(memoryview(buf)[: n - len(out)])):
                        out += buf[:k]
                except EOFError:  # the file ends inside a frame: what it holds
                    pass
            return bytes(out)
        if kind == "bz2":  # blocks of up to 900 kB: a small head decompresses to nothing
            with open_binary(path) as z:
                return z.read(n)
        return head[:n]
    except (OSError, EOFError, ValueError, zlib.error, zstandard.ZstdError):
        return b""


def cut_before_first_block(path: InputPath) -> bool:
    """A compressed file whose stream ends (or breaks) before it gives its first byte: truncated, not
    binary. Only asked when ``peek`` found nothing, so at most one block is decompressed."""
    if compression_of(path) is None:
        return False
    try:
        with open_binary(path) as z:
            z.read(1)
    except (OSError, EOFError, ValueError, zlib.error, zstandard.ZstdError):
        return True
    return False
