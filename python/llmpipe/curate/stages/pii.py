"""Redact PII: e-mail addresses, public IPv4/IPv6 addresses and phone numbers become placeholders.

Private, loopback, link-local, reserved and documentation addresses and version numbers are left
alone. ``modified`` counts changed documents; ``counters`` counts replacements per kind.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import Mapper, StageCounts
from llmpipe.quality import PiiConfig, core_json

KINDS = ("email", "ipv4", "ipv6", "phone")


class PiiRedact(Mapper):
    name: ClassVar[str] = "pii"

    @dataclass
    class Config(PiiConfig):
        enabled: bool = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.payload = core_json(cfg, PiiConfig)
        self._found: Counter[str] = Counter()

    @classmethod
    def from_config(cls, cfg: Config) -> PiiRedact | None:
        return cls(cfg) if cfg.enabled else None

    def map(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
        text = batch.column("text")
        new, counts = _core.pii_redact(string_buffers(text), self.payload)
        for c in counts:
            for kind, n in zip(KINDS, c, strict=True):
                if n:
                    self._found[kind] += n
        changed = sum(1 for n in new if n is not None)
        if not changed:
            return batch, 0
        out = pc.coalesce(pa.array(new, text.type), text)  # only redacted texts become Python strings
        return batch.set_column(batch.schema.get_field_index("text"), "text", out), changed

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        self._found = Counter()
        out = super().run(batch, counts)
        counts.counters.update({f"replaced_{k}": n for k, n in self._found.items()})
        return out
