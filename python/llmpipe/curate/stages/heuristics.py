"""datatrove's heuristic filters as curate stages: Gopher repetition, Gopher quality, FineWeb.

Each is a keep/drop filter with datatrove 0.9's defaults and reason strings (every threshold is a
key of its YAML section); the work is one Rust call per batch. C4 rewrites text, see ``c4.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import Filter
from llmpipe.quality import FineWebConfig, GopherQualityConfig, GopherRepetitionConfig, core_json


class _CoreFilter(Filter):
    base: ClassVar[type]

    def __init__(self, cfg: object) -> None:
        self.cfg = cfg
        self.payload = core_json(cfg, self.base)

    @classmethod
    def from_config(cls, cfg: object) -> _CoreFilter | None:
        return cls(cfg) if getattr(cfg, "enabled", True) else None

    def reasons(self, batch: pa.RecordBatch) -> Sequence[str | None]:
        return _core.quality_filter(self.name, string_buffers(batch.column("text")), self.payload)


class GopherRepetition(_CoreFilter):
    name: ClassVar[str] = "gopher_repetition"
    base = GopherRepetitionConfig

    @dataclass
    class Config(GopherRepetitionConfig):
        enabled: bool = True


class GopherQuality(_CoreFilter):
    name: ClassVar[str] = "gopher_quality"
    base = GopherQualityConfig

    @dataclass
    class Config(GopherQualityConfig):
        enabled: bool = True


class FineWeb(_CoreFilter):
    name: ClassVar[str] = "fineweb"
    base = FineWebConfig

    @dataclass
    class Config(FineWebConfig):
        enabled: bool = True
