"""Drop documents that are too short or too long to be useful training text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from llmpipe.curate.stage import Filter, word_counts


class LengthFilter(Filter):
    name: ClassVar[str] = "length"

    @dataclass
    class Config:
        enabled: bool = True
        min_words: int = 5
        max_words: int | None = None

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: Config) -> LengthFilter | None:
        return cls(cfg) if cfg.enabled else None

    def reasons(self, batch: pa.RecordBatch) -> Sequence[str | None]:
        words = word_counts(batch)
        lo, hi = self.cfg.min_words, self.cfg.max_words
        return [
            "too_few_words" if w < lo else "too_many_words" if hi is not None and w > hi else None
            for w in words.tolist()
        ]
