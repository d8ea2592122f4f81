"""Inputs on any fsspec file system (``s3://bucket/key``, ``gs://``, ``memory://`` ...) beside local paths.

A remote input is a ``RemotePath``: the few things the readers ask of a ``Path`` (its name, size and
modification time, and a binary stream) answered through fsspec. Streams are read in blocks (a range
request each on an object store), never downloaded whole; they are seekable, so byte-range chunks of a
JSONL file and row groups of a Parquet file read only their part. Credentials and endpoints come from
the environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL`` ...), so Ray workers open the same URLs
the driver discovered. Errors of the store (no bucket, no credentials, no connection) become one
``InputError`` line.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from llmpipe.errors import InputError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: bytes asked of the store at a time (one range request each)
BLOCK = 8 << 20

T = TypeVar("T")


def is_url(s: str | os.PathLike[str]) -> bool:
    """A URL of a file system other than the local one (``file://`` is a local path)."""
    return isinstance(s, str) and bool(_URL.match(s)) and not s.startswith("file://")


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """Why a local path that should name a file does not, for an error line: "is a directory, not a
    file", "is not a regular file" (a FIFO, a device) or "does not exist"; None when it is a file."""
    p = Path(path).expanduser()
    if p.is_file():
        return None
    if p.is_dir():
        return "is a directory, not a file"
    return "is not a regular file" if p.exists() else "does not exist"


def local_or_url(s: str) -> str:
    """``file:///x`` -> ``/x``; anything else unchanged."""
    return s.removeprefix("file://") if s.startswith("file://") else s


def filesystem(url: str) -> tuple[Any, str]:
    """fsspec's file system for ``url`` and the path on it (no protocol)."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as e:  # the protocol's package is not installed
        if url.split("://", 1)[0].lower() in ("s3", "s3a"):
            raise InputError(
                f"{url}: s3:// needs the 's3' extra (s3fs is not installed): pip install 'llmpipe[s3]'"
            ) from None
        raise InputError(f"{url}: {e}") from None
    except ValueError as e:  # an unknown protocol
        raise InputError(f"{url}: {e}") from None


def store_call(url: str, what: str, fn: Callable[[], T]) -> T:
    """``fn()``, with a failure of the store said in one line. ``FileNotFoundError`` passes through
    (callers say what was missing)."""
    try:
        return fn()
    except FileNotFoundError:
        raise
    except InputError:
        raise
    except Exception as e:  # botocore/aiohttp/gcsfs errors share no base class but Exception
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise InputError(f"{url}: cannot {what} ({type(e).__name__}: {detail})") from None


@dataclass(frozen=True)
class RemoteStat:
    st_size: int
    st_mtime_ns: int


class RemotePath:
    """One file on an fsspec file system, answering what the readers ask of a ``Path``."""

    def __init__(self, url: str, info: dict[str, Any] | None = None) -> None:
        self.url = url
        self.fs, self.path = filesystem(url)
        self._info = info

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemotePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __lt__(self, other: RemotePath) -> bool:
        return self.url < other.url

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def protocol(self) -> str:
        return self.url.split("://", 1)[0]

    def info(self) -> dict[str, Any]:
        if self._info is None:
            self._info = store_call(self.url, "read it", lambda: self.fs.info(self.path))
        return self._info

    def stat(self) -> RemoteStat:
        info = self.info()
        mtime = info.get("LastModified") or info.get("mtime") or info.get("updated") or 0
        ns = int(mtime.timestamp() * 1e9) if hasattr(mtime, "timestamp") else int(float(mtime) * 1e9)
        return RemoteStat(int(info["size"]), ns)

    def is_file(self) -> bool:
        return self.info().get("type") == "file"

    def open(self, mode: str = "rb") -> BinaryIO:
        """A buffered, seekable stream read in ``BLOCK`` ranges (C-speed ``readline``)."""
        if mode != "rb":
            raise ValueError(f"remote inputs are read only, not opened with {mode!r}")
        size = self.stat().st_size
        raw = store_call(
            self.url,
            "open it",
            lambda: self.fs.open(self.path, "rb", block_size=BLOCK, cache_type="none", size=size),
        )
        return io.BufferedReader(_StoreReader(self.url, raw), BLOCK)


class _StoreReader(io.RawIOBase):
    """An fsspec file whose failures (a lost connection, expired credentials) are ``InputError``: the
    readers take an ``OSError`` for a corrupt file and quarantine the rest of it; a store that fails
    must stop the run instead (a re-run resumes)."""

    def __init__(self, url: str, raw: Any) -> None:
        self.url = url
        self.raw = raw

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        return int(self.raw.seek(pos, whence))

    def tell(self) -> int:
        return int(self.raw.tell())

    def readinto(self, b: Any) -> int:
        try:
            data = self.raw.read(len(b))
        except Exception as e:  # noqa: BLE001 - any failure of the store, said in one line
            detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise InputError(f"{self.url}: reading failed ({type(e).__name__}: {detail})") from None
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            super().close()


#: an input file: a local path or a file on another file system
InputPath = Path | RemotePath


def as_input(s: str | os.PathLike[str]) -> InputPath:
    """The input named by a string a worker got (a URL or a local path)."""
    return RemotePath(s) if isinstance(s, str) and is_url(s) else Path(local_or_url(os.fspath(s)))
