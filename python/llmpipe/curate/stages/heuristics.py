"""datatrove's heuristic filters as curate stages: Gopher repetition, Gopher quality, FineWeb.

Each is a keep/drop filter with datatrove 0.9's defaults and reason strings (every threshold is a
key of its YAML section); the work is one Rust call per batch (per language present in the batch).
When the language stage ran, a document uses the settings of its language
(:mod:`llmpipe.curate.language_settings`: stop words, thresholds); English and languages without a
settings file use the section as configured. C4 rewrites text, see ``c4.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.config import from_dict
from llmpipe.curate import language_settings
from llmpipe.curate.stage import Filter
from llmpipe.quality import FineWebConfig, GopherQualityConfig, GopherRepetitionConfig, core_json


@dataclass
class PerLanguage:
    #: use the settings of the document's detected language (the ``lang`` column), when there are any
    per_language: bool = True
    #: a directory of ``<lang>.yaml`` files adding to (or replacing) the built-in per-language ones
    language_settings: str | None = None


class _CoreFilter(Filter):
    base: ClassVar[type]

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.payload = core_json(cfg, self.base)
        #: language -> the core config JSON for it (only languages with settings for this filter)
        self.by_lang: dict[str, str] = {}
        if cfg.per_language:
            mine = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(self.base)}
            for code, sections in language_settings.load(cfg.language_settings).items():
                if self.name in sections:
                    merged = {**mine, **sections[self.name]}
                    lang_cfg: Any = from_dict(self.base, merged, f"{code}.yaml: {self.name}")
                    self.by_lang[code] = core_json(lang_cfg)

    @classmethod
    def from_config(cls, cfg: Any) -> _CoreFilter | None:
        return cls(cfg) if getattr(cfg, "enabled", True) else None

    def reasons(self, batch: pa.RecordBatch) -> Sequence[str | None]:
        texts = batch.column("text")
        if not self.by_lang or "lang" not in batch.schema.names:
            return _core.quality_filter(self.name, string_buffers(texts), self.payload)
        payloads = [
            language_settings.lookup(self.by_lang, c or "") or self.payload
            for c in batch.column("lang").to_pylist()
        ]
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(payloads):
            groups.setdefault(p, []).append(i)
        out: list[str | None] = [None] * batch.num_rows
        for payload, rows in groups.items():
            idx = np.asarray(rows, dtype=np.int64)
            sub = texts if len(rows) == batch.num_rows else texts.take(pa.array(idx))
            for i, r in zip(rows, _core.quality_filter(self.name, string_buffers(sub), payload), strict=True):
                out[i] = r
        return out


class GopherRepetition(_CoreFilter):
    name: ClassVar[str] = "gopher_repetition"
    base = GopherRepetitionConfig

    @dataclass
    class Config(GopherRepetitionConfig, PerLanguage):
        enabled: bool = True


class GopherQuality(_CoreFilter):
    name: ClassVar[str] = "gopher_quality"
    base = GopherQualityConfig

    @dataclass
    class Config(GopherQualityConfig, PerLanguage):
        enabled: bool = True


class FineWeb(_CoreFilter):
    name: ClassVar[str] = "fineweb"
    base = FineWebConfig

    @dataclass
    class Config(FineWebConfig, PerLanguage):
        enabled: bool = True
