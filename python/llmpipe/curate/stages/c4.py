"""C4's rules as a curate stage: drop a document (``lorem_ipsum``, ``curly_bracket``,
``too_few_sentences``) or keep it rewritten to its kept lines (datatrove's ``C4QualityFilter``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import DocStage, StageCounts, apply_reasons, word_counts
from llmpipe.quality import C4Config, core_json


class C4(DocStage):
    """Counts: tokens in = words before cleaning; out = words of the kept, cleaned documents; the
    difference that is not a drop is recorded as ``counters["words_removed_by_line_cleaning"]``."""

    name: ClassVar[str] = "c4"

    @dataclass
    class Config(C4Config):
        enabled: bool = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.payload = core_json(cfg, C4Config)

    @classmethod
    def from_config(cls, cfg: Config) -> C4 | None:
        return cls(cfg) if cfg.enabled else None

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        text = batch.column("text")
        reasons, cleaned = _core.quality_c4(string_buffers(text), self.payload)
        words_before = word_counts(batch)
        out = batch
        if any(c is not None for c in cleaned):  # only rewritten texts become Python strings
            new = pa.array(cleaned, text.type)
            changed = int(pc.sum(pc.fill_null(pc.not_equal(new, text), False)).as_py() or 0)
            out = batch.set_column(batch.schema.get_field_index("text"), "text", pc.coalesce(new, text))
        else:
            changed = 0
        kept = apply_reasons(out, reasons, counts, words_before)
        # apply_reasons counted tokens_out with the words before cleaning: correct it
        keep = np.fromiter((r is None for r in reasons), dtype=bool, count=len(reasons))
        after = int(word_counts(kept).sum()) if kept.num_rows else 0
        removed = int(words_before[keep].sum()) - after
        counts.tokens_out -= removed
        counts.counters["words_removed_by_line_cleaning"] += removed
        counts.modified += changed
        return kept
