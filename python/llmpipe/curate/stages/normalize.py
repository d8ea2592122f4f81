"""Unicode and whitespace normalisation of the stored text (vectorised in Arrow, no per-document Python)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmpipe.curate.stage import Mapper


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

    def map(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
        text = batch.column("text")
        out = pc.utf8_normalize(text, form=self.cfg.form)
        out = pc.replace_substring_regex(out, pattern=r"\r\n?", replacement="\n")
        out = pc.replace_substring_regex(
            out, pattern=r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x{FEFF}]", replacement=""
        )
        out = pc.replace_substring_regex(out, pattern=r"[ \t]+\n", replacement="\n")
        out = pc.replace_substring_regex(out, pattern=r"\n{3,}", replacement="\n\n")
        out = pc.utf8_trim_whitespace(out)
        changed = int(
            np.asarray(pc.not_equal(text, out).fill_null(False).to_numpy(zero_copy_only=False)).sum()
        )
        idx = batch.schema.get_field_index("text")
        return batch.set_column(idx, "text", out), changed
