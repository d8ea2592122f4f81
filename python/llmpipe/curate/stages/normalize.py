"""Unicode and whitespace normalisation of the stored text: one Rust pass per batch (llmpipe_text::clean)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import Mapped, Mapper


class Normalize(Mapper):
    """NFC, ``\\r\\n`` -> ``\\n``, control characters removed, trailing spaces and 3+ blank lines trimmed."""

    name: ClassVar[str] = "normalize"

    @dataclass
    class Config:
        enabled: bool = True
        form: str = "NFC"

    def __init__(self, cfg: Config) -> None:
        if cfg.form not in ("NFC", "NFKC", "NFD", "NFKD"):
            raise ValueError(f"normalize.form must be NFC, NFKC, NFD or NFKD, not {cfg.form!r}")
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: Config) -> Normalize | None:
        return cls(cfg) if cfg.enabled else None

    def map(self, batch: pa.RecordBatch) -> Mapped:
        text = batch.column("text")
        offsets, data = string_buffers(text)
        offs, out, changed = _core.clean_texts(offsets, data, self.cfg.form)
        cleaned = pa.LargeStringArray.from_buffers(len(text), pa.py_buffer(offs), pa.py_buffer(out))
        if cleaned.type != text.type:
            cleaned = cleaned.cast(text.type)
        idx = batch.schema.get_field_index("text")
        return Mapped(batch.set_column(idx, "text", cleaned), int(changed))
