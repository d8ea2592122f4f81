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


class _ZstdReader(io.RawIOBase):
    """zstd frames one after another; a stream that ends inside a frame raises ``EOFError``.

    (zstandard's own stream reader ends quietly at a cut, so a truncated file would read as shorter.)
    """

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.dec = zstandard.ZstdDecompressor().decompressobj()
        self.started = False  # bytes of the current frame were fed
        self.buf = b""
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self.pos == len(self.buf):
            self.buf, self.pos = b"", 0
            chunk = self.raw.read(1 << 16)
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
        if kind == "zstd":
            return zstandard.ZstdDecompressor().decompressobj().decompress(head)[:n]
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
