"""Open plain, gzip, zstd or bzip2 files by their magic bytes (not only their names)."""

from __future__ import annotations

import bz2
import gzip
import io
from pathlib import Path
from typing import BinaryIO

import zstandard

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BZ2_MAGIC = b"BZh"


def compression_of(path: Path) -> str | None:
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(BZ2_MAGIC):
        return "bz2"
    return None


def open_binary(path: Path) -> BinaryIO:
    """A streaming binary reader that decompresses transparently."""
    kind = compression_of(path)
    if kind == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if kind == "zstd":
        raw = open(path, "rb")  # noqa: SIM115 - owned by the returned stream
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))  # type: ignore[arg-type]
    if kind == "bz2":
        return bz2.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")  # noqa: SIM115


def peek(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` decompressed bytes (empty on a truncated or unreadable stream)."""
    try:
        with open_binary(path) as f:
            return f.read(n)
    except (OSError, EOFError, zstandard.ZstdError):
        return b""
