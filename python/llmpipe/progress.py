"""Progress of a long model step (scoring windows, GPTQ's layers, fine-tuning steps), as curate reports its own.

On a terminal it is one tqdm bar on stderr; otherwise (a log file, a captured run) one line every
``EVERY`` seconds (``LLMPIPE_PROGRESS_EVERY``, default 5), ``eval: 120 of 480 windows (25%), 31.2
windows/s, ETA 12 s``, and nothing at all for a step shorter than that.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

EVERY = float(os.environ.get("LLMPIPE_PROGRESS_EVERY", "5"))  # seconds between two lines in a log


class Progress:
    def __init__(
        self,
        total: int,
        what: str,
        unit: str,
        *,
        tty: bool | None = None,
        every: float | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.total, self.what, self.unit = max(0, total), what, unit
        self.stream = stream or sys.stderr
        self.every = EVERY if every is None else every
        self.done = 0
        self.start = self.last = time.monotonic()
        self.bar: Any = None
        if self.stream.isatty() if tty is None else tty:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc=what, unit=f" {unit}", file=self.stream, leave=False)

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            if note:
                self.bar.set_postfix_str(note)
        elif time.monotonic() - self.last >= self.every:
            self.line(note)

    def line(self, note: str = "") -> None:
        now = time.monotonic()
        self.last = now
        rate = self.done / max(now - self.start, 1e-9)
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        eta = f", ETA {(self.total - self.done) / rate:.0f} s" if 0 < self.done < self.total else ""
        extra = f", {note}" if note else ""
        print(
            f"{self.what}: {self.done:,} of {self.total:,} {self.unit}{share}, {rate:.1f} {self.unit}/s{eta}{extra}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
