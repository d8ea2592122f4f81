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
from llmpipe.curate.stage import Mapped, Mapper
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

    @classmethod
    def from_config(cls, cfg: Config) -> PiiRedact | None:
        return cls(cfg) if cfg.enabled else None

    def map(self, batch: pa.RecordBatch) -> Mapped:
        text = batch.column("text")
        new, per_doc = _core.pii_redact(string_buffers(text), self.payload)
        found: Counter[str] = Counter()
        for c in per_doc:
            for kind, n in zip(KINDS, c, strict=True):
                if n:
                    found[f"replaced_{kind}"] += n
        changed = sum(1 for n in new if n is not None)
        if not changed:
            return Mapped(batch, 0, counters=found)
        out = pc.coalesce(pa.array(new, text.type), text)  # only redacted texts become Python strings
        return Mapped(
            batch.set_column(batch.schema.get_field_index("text"), "text", out), changed, counters=found
        )
