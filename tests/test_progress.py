"""A curate run on a terminal: one progress bar that names the phases, and the run's own lines each on
a line of their own (not written onto the end of the bar's line)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from conftest import ROOT


def _on_a_terminal(cmd: list[str], timeout: float = 300) -> tuple[int, str]:
    """Run ``cmd`` with stdout and stderr on a pseudo-terminal; its exit status and all it wrote."""
    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # 160 columns: a bar is drawn
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=sub, stderr=sub, close_fds=True)
    os.close(sub)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal closed: every writer exited
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(main)
    return proc.wait(timeout=60), out.decode(errors="replace")


def test_curate_on_a_terminal_draws_one_bar_and_keeps_its_lines_whole(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("llmpipe")
    cfg = ROOT / "configs" / "curate" / "sample.yaml"
    rc, out = _on_a_terminal([str(exe), "curate", str(ROOT / "examples" / "raw"), "--out", str(tmp_path / "o"),
                              "--config", str(cfg), "--workers", "1"])  # fmt: skip
    assert rc == 0, out
    assert "Traceback" not in out
    # the bar: redrawn in place (carriage returns), naming the phases it goes through
    assert out.count("\r") > 3, out
    for phase in ("read", "tokenizer training", "tokenize", "pack"):
        assert re.search(rf"\r{re.escape(phase)}[: ]", out), (phase, out)
    # each line of the run starts a line: the bar is cleared before it (its last character is a
    # carriage return or a newline, never part of the bar)
    for line in ("curate: 5 input(s)", "tokenizer: training byte-level BPE", "curate: kept "):
        at = out.find(line)
        assert at >= 0, (line, out)
        assert at == 0 or out[at - 1] in "\r\n", (line, repr(out[max(0, at - 80) : at + len(line)]))
