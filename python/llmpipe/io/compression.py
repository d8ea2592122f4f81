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
    """A streaming binary reader that decompresses transparently (a local or a remote file)."""
    kind = compression_of(path)
    raw = path.open("rb")
    if kind == "gzip":
        return _Owning(gzip.GzipFile(fileobj=raw, mode="rb"), raw)
    if kind == "zstd":
        return io.BufferedReader(_ZstdReader(raw))
    if kind == "bz2":
        return _Owning(bz2.BZ2File(raw, "rb"), raw)
    return raw


class _Owning(io.BufferedReader):
    """A decompressing reader that also closes the file it reads (gzip and bz2 leave a file object
    they were given open)."""

    def __init__(self, stream: Any, source: BinaryIO) -> None:
        super().__init__(stream)
        self.source = source

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.source.close()


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


def peek(path: InputPath, n: int = 4096) -> bytes:
    """The first ``n`` decompressed bytes, or as many as a truncated stream holds (empty if unreadable)."""
    try:
        kind = compression_of(path)
        with path.open("rb") as f:
            head = f.read(max(n, 1 << 16))
        if kind == "gzip":
            return zlib.decompressobj(wbits=31).decompress(head, n)
        if kind == "zstd":  # read through the bounded reader: 64 KB of RLE blocks inflate to 2 GB
            zr, out, buf = _ZstdReader(io.BytesIO(head)), bytearray(), bytearray(n)
            try:
                while len(out) < n and (k := zr.readinto(memoryview(buf)[: n - len(out)])):
                    out += buf[:k]
            except EOFError:  # the head ends inside a frame: what it holds
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
