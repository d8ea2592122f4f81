"""One progress report for a whole curate run: bytes and documents read, rate, ETA and the phase.

On a terminal it is one tqdm bar; otherwise (a log file, a Ray job's output) one line every
``every`` seconds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any


class JobProgress:
    def __init__(
        self,
        total_bytes: int,
        tty: bool,
        log: Callable[[str], None],
        every: float = 30.0,
        enabled: bool = True,
    ) -> None:
        self.total = max(1, total_bytes)
        self.log = log
        self.every = every
        self.enabled = enabled
        self.done_bytes = 0
        self.docs = 0
        self.name = "read"
        self.start = self.last = time.monotonic()
        self.bar: Any = None
        if enabled and tty:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="B", unit_scale=True, desc="read", file=sys.stderr)

    def say(self, msg: str) -> None:
        """``log(msg)`` on a line of its own: on a terminal the bar is cleared first and drawn again
        below the line (written plainly, the line would land at the end of the bar's)."""
        if self.bar is None:
            self.log(msg)
            return
        with self.bar.external_write_mode():  # clears the bars on stdout/stderr, redraws them after
            self.log(msg)
            sys.stdout.flush()

    def phase(self, name: str) -> None:
        """The run moved on to ``name`` (a dedup resolve, tokenize, pack ...)."""
        self.name = name
        if self.bar is not None:
            self.bar.set_description(name)

    def read(self, nbytes: int, docs: int) -> None:
        """A part of the input was read and went through the first segment of stages."""
        self.done_bytes += nbytes
        self.docs += docs
        if self.bar is not None:
            self.bar.update(nbytes)
            self.bar.set_postfix(docs=f"{self.docs:,}")
        elif self.enabled and time.monotonic() - self.last >= self.every:  # a log: now and then
            self._line()

    def _line(self) -> None:
        now = time.monotonic()
        self.last = now
        rate = self.done_bytes / max(now - self.start, 1e-9)
        left = (self.total - self.done_bytes) / rate if rate > 0 else float("inf")
        eta = f", ETA {left:.0f} s" if self.done_bytes and self.done_bytes < self.total else ""
        self.log(
            f"curate: {self.name}: {self.done_bytes / 1e6:,.1f} of {self.total / 1e6:,.1f} MB read, "
            f"{self.docs:,} documents, {rate / 1e6:.1f} MB/s{eta}"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
