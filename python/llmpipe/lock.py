"""An exclusive lock on an output directory, so that two runs never write into the same one.

``fcntl.flock`` on ``DIR/.llmpipe.lock``: the kernel drops the lock when the holder exits, however it
exits (kill -9 included), so a stale lock file never blocks a later run. The file records who holds it
(pid, host, command) for the one-line error a second run prints; a run that ends removes it, so the
directory holds only its outputs.

The lock file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and never opened through a symlink: a
``.llmpipe.lock`` planted as a symlink (or a hard link, a FIFO) is refused
with one line, so its target is never written. A lock file a killed run left behind (a regular file
with one link) is reused.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import sys
from pathlib import Path
from types import TracebackType

from llmpipe.errors import LlmpipeError

LOCK_FILE = ".llmpipe.lock"


class DirLockedError(LlmpipeError):
    """Another run holds the directory."""


class DirLock:
    def __init__(self, directory: Path, what: str = "output directory") -> None:
        self.path = Path(directory) / LOCK_FILE
        self.what = what
        self.fd: int | None = None

    def _open(self) -> int:
        """The lock file's descriptor: created new (O_EXCL), or one a killed run left (checked)."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        while True:
            try:
                return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                pass
            try:
                fd = os.open(self.path, flags)
            except FileNotFoundError:
                continue  # removed by its holder in between: create it
            except OSError:
                if os.path.islink(self.path):
                    raise LlmpipeError(
                        f"{self.path}: a symlink, not llmpipe's lock file; remove it (its target is not "
                        "touched)"
                    ) from None
                raise
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                os.close(fd)
                what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "a file with other links"
                raise LlmpipeError(f"{self.path}: {what}, not llmpipe's lock file; remove it")
            return fd

    def acquire(self) -> DirLock:
        while True:
            try:
                fd = self._open()
            except OSError as e:
                raise LlmpipeError(
                    f"{self.path.parent}: cannot write in this {self.what} ({e.strerror})"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise DirLockedError(
                    f"{self.path.parent}: this {self.what} is in use by another run ({holder}); "
                    "wait for it to finish or choose another directory"
                ) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the holder removed the file as we opened it: lock the new one
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # still locked: a run that opened it retries (acquire)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _holder(fd: int) -> str:
    try:
        rec = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {rec['pid']} on {rec['host']}: {rec['command']}"
    except (OSError, ValueError, KeyError):
        return "holder unknown"
