"""Keep documents in the configured languages, detected with a score (``lang``, ``lang_score`` columns)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import Filter


class LanguageFilter(Filter):
    """whatlang's trigram models (compiled into the extension); codes are ISO 639-3 (``eng``, ``deu``)."""

    name: ClassVar[str] = "language"
    example_columns: ClassVar[tuple[str, ...]] = ("lang", "lang_score")

    @dataclass
    class Config:
        enabled: bool = True
        #: languages to keep (ISO 639-3); an empty list keeps every language (only annotates)
        languages: list[str] = field(default_factory=lambda: ["eng"])
        #: minimum detector confidence (datatrove's LanguageFilter default is 0.65)
        min_score: float = 0.65

    def __init__(self, cfg: Config) -> None:
        known = {code for code, _ in _core.language_codes()}
        unknown = sorted(set(cfg.languages) - known)
        if unknown:
            raise ValueError(f"unknown language code(s) {unknown}; known (ISO 639-3): {sorted(known)}")
        if not 0.0 <= cfg.min_score <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], not {cfg.min_score}")
        self.cfg = cfg
        self.keep = set(cfg.languages)

    @classmethod
    def from_config(cls, cfg: Config) -> LanguageFilter | None:
        return cls(cfg) if cfg.enabled else None

    def annotate(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        codes, scores = _core.detect_language(string_buffers(batch.column("text")))
        for name, col in (
            ("lang", pa.array(codes, pa.string())),
            ("lang_score", pa.array(scores, pa.float64())),
        ):
            i = batch.schema.get_field_index(name)
            batch = batch.set_column(i, name, col) if i >= 0 else batch.append_column(name, col)
        return batch

    def reasons(self, batch: pa.RecordBatch) -> Sequence[str | None]:
        if not self.keep:
            return [None] * batch.num_rows
        codes = batch.column("lang").to_pylist()
        scores = batch.column("lang_score").to_pylist()
        return [
            "other_language"
            if c not in self.keep
            else "low_language_score"
            if s < self.cfg.min_score
            else None
            for c, s in zip(codes, scores, strict=True)
        ]
