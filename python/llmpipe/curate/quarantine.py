"""Quarantined records stream to a per-input file in the work directory, never into memory.

Each read step writes ``seg0/<input>.quarantine.jsonl`` (renamed into place before its marker, like
every step output) and keeps only the count per reason; the run's ``quarantine.jsonl`` is these files
concatenated in input order.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import IO

from llmpipe.curate.workdir import temp_path
from llmpipe.io.records import Bad


class QuarantineWriter:
    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self.tmp = temp_path(path)
        self.by_reason: Counter[str] = Counter()
        self._f: IO[str] | None = None

    def add(self, b: Bad) -> None:
        if self._f is None:
            self._f = open(self.tmp, "w", encoding="utf-8")  # noqa: SIM115 - closed by commit
        self._f.write(json.dumps(b.to_dict(self.source), ensure_ascii=False) + "\n")
        self.by_reason[b.reason] += 1

    def commit(self) -> None:
        """Rename into place (an empty file when nothing was quarantined)."""
        if self._f is None:
            self.tmp.write_bytes(b"")
        else:
            self._f.close()
            self._f = None
        os.replace(self.tmp, self.path)


def concatenate(parts: list[Path], dest: Path) -> None:
    """``dest`` (atomically) holds the parts one after another."""
    tmp = temp_path(dest)
    with open(tmp, "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    os.replace(tmp, dest)
