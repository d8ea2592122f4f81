"""Process helpers for tests that start servers and clusters: free ports, /proc, kill by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def procs() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) for every process we can read."""
    out: dict[int, tuple[int, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        out[int(d.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)
    return out


def with_descendants(roots: set[int], table: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """``roots`` and every process below them."""
    table = procs() if table is None else table
    ours = set(roots)
    while more := {p for p, (pp, _) in table.items() if pp in ours and p not in ours}:
        ours |= more
    return ours


def kill_all(pids: set[int]) -> None:
    """SIGTERM, then SIGKILL what is left, waiting up to 10 s after each."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
        deadline = time.time() + 10
        while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.2)
