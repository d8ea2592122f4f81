"""C4's rules as a curate stage: drop a document (``lorem_ipsum``, ``curly_bracket``,
``too_few_sentences``) or keep it rewritten to its kept lines (datatrove's ``C4QualityFilter``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import Mapped, Mapper
from llmpipe.quality import C4Config, core_json


class C4(Mapper):
    """Drops documents by C4's rules and keeps the others rewritten to their kept lines. The words the
    line cleaning removes from kept documents are tallied as ``words_removed_by_line_cleaning``."""

    name: ClassVar[str] = "c4"
    removed_words_counter: ClassVar[str | None] = "words_removed_by_line_cleaning"

    @dataclass
    class Config(C4Config):
        enabled: bool = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.payload = core_json(cfg, C4Config)

    @classmethod
    def from_config(cls, cfg: Config) -> C4 | None:
        return cls(cfg) if cfg.enabled else None

    def map(self, batch: pa.RecordBatch) -> Mapped:
        text = batch.column("text")
        if text.null_count:  # a null text stays null when dropped: the per-document path keeps it
            reasons, cleaned = _core.quality_c4(string_buffers(text), self.payload)
            if all(c is None for c in cleaned):
                return Mapped(batch, 0, reasons)
            new = pa.array(cleaned, text.type)  # only rewritten texts became Python strings
            changed = int(pc.sum(pc.fill_null(pc.not_equal(new, text), False)).as_py() or 0)
            out = batch.set_column(batch.schema.get_field_index("text"), "text", pc.coalesce(new, text))
            return Mapped(out, changed, reasons)
        # the texts after C4 come back as one Arrow column (no Python string per document)
        reasons, offs, data, changed = _core.quality_c4_column(string_buffers(text), self.payload)
        if changed == 0:
            return Mapped(batch, 0, reasons)
        col = pa.LargeStringArray.from_buffers(len(text), pa.py_buffer(offs), pa.py_buffer(data))
        if col.type != text.type:
            col = col.cast(text.type)
        out = batch.set_column(batch.schema.get_field_index("text"), "text", col)
        return Mapped(out, int(changed), reasons)
