"""HTML -> main text for web pages (resiliparse); other documents pass through unchanged."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa

from llmpipe import _core
from llmpipe.curate.stage import Mapped, Mapper
from llmpipe.curate.stages.read import raw_words
from llmpipe.io.config import ReadConfig
from llmpipe.io.extract import html_to_text
from llmpipe.io.records import RAW_SCHEMA


class Extract(Mapper):
    """Takes each web page's main text (``read.html_main_content``: else all visible text).

    Tokens in are the page's HTML words, out the words of its text; a page without main text is
    dropped as ``empty_after_extract`` (a document that was empty before is left to later stages),
    one the parser rejects as ``extraction_failed``, one whose elements nest deeper than
    ``read.max_html_depth`` as ``html_too_deep`` (measured by a linear scan, never parsed).
    ``modified`` counts the pages extracted. The reader's ``raw_words`` column ends here.
    """

    name: ClassVar[str] = "extract"
    Config: ClassVar[type[ReadConfig]] = ReadConfig  # configured by the ``read`` section

    def __init__(self, cfg: ReadConfig) -> None:
        self.main_content = cfg.html_main_content
        self.max_depth = cfg.max_html_depth

    @classmethod
    def from_config(cls, cfg: ReadConfig) -> Extract:
        return cls(cfg)

    def words_before(self, batch: pa.RecordBatch) -> np.ndarray:
        return raw_words(batch)

    def rewritten(self, batch: pa.RecordBatch) -> np.ndarray:
        return batch.column("raw_words").to_numpy() >= 0  # the pages; other documents pass unjudged

    def map(self, batch: pa.RecordBatch) -> Mapped:
        pages = np.flatnonzero(batch.column("raw_words").to_numpy() >= 0)
        out = batch.drop_columns(["raw_words"])
        if not len(pages):
            return Mapped(out, 0)
        texts = batch.column("text").to_pylist()
        reasons: list[str | None] = [None] * batch.num_rows
        depths = _core.html_depths([texts[i] for i in pages.tolist()], self.max_depth)
        for i, depth in zip(pages.tolist(), depths, strict=True):
            if depth > self.max_depth:  # measured in one pass before the parser sees it
                texts[i], reasons[i] = "", "html_too_deep"
                continue
            try:
                texts[i] = html_to_text(texts[i], self.main_content)
            except Exception:  # noqa: BLE001 - resiliparse raises its own parser errors
                texts[i], reasons[i] = "", "extraction_failed"
        text = pa.array(texts, RAW_SCHEMA.field("text").type)
        return Mapped(out.set_column(out.schema.get_field_index("text"), "text", text), len(pages), reasons)
