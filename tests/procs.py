"""Process helpers for tests that start servers and clusters: free ports, /proc, kill by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

_GIVEN: set[int] = set()


def free_port() -> int:
    """A port free now that this process has not handed out before: once a picked port's socket is
    closed the kernel may give the same port to the next pick, and a Ray node given one port for two
    agents fails to start (seen: --runtime-env-agent-port and --metrics-export-port both 53889)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


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


def ray_agent_ports() -> list[str]:
    """Fixed ports for a Ray node's agents. With port 0 the raylet waits a fixed 15 s for the dashboard
    agent to write the port it bound and aborts the node past that, which a loaded 2-core machine
    misses; with the port given there is nothing to wait for."""
    flags = ("--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--runtime-env-agent-port")
    return [x for f in (*flags, "--metrics-export-port") for x in (f, str(free_port()))]


#: environment for a private test cluster on a loaded machine: a slow raylet is waited for (default
#: 10 s), and no token (one in ~/.ray would be read by some processes only)
RAY_TEST_ENV = {"RAY_raylet_start_wait_time_s": "120", "RAY_AUTH_MODE": "disabled"}


def ray_start(
    command: Callable[[], list[str]], env: dict[str, str], owned: Callable[[], set[int]], tries: int = 3
) -> None:
    """Run ``ray start`` (``command()`` builds it, with fresh agent ports each time). A node that fails
    to start on a loaded machine (a raylet past a deadline, a port taken between pick and bind) has its
    leftover processes (those ``owned()`` gained) killed and is started again; the last failure is
    raised with the command's own output."""
    for attempt in range(1, tries + 1):
        before = owned()
        cmd = command()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if p.returncode == 0:
            return
        kill_all(owned() - before)
        if attempt == tries:
            raise AssertionError(
                f"{' '.join(cmd[1:3])} failed {tries} times; the last:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
            )


def with_default_sigint(cmd: list[str]) -> list[str]:
    """``cmd`` run as from a terminal, where Ctrl-C's SIGINT is not ignored: a shell's background job
    (``make test &`` in a script) starts with SIGINT ignored, every process below it inherits that,
    and Python then never raises KeyboardInterrupt. A tiny Python restores the default, then execs."""
    restore = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", restore, *cmd]
