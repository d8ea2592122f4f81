"""The source of the pipeline: every record of one input is a document, a skipped record or a bad one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar

import numpy as np
import pyarrow as pa

from llmpipe.curate.stage import StageCounts, counted, word_counts
from llmpipe.io.chunks import Span
from llmpipe.io.config import ReadConfig
from llmpipe.io.fs import InputPath
from llmpipe.io.read import read_input
from llmpipe.io.records import Bad, Skip


class Read:
    """Streams one input as document batches and accounts for every record of it.

    Counts: in, every record; out, the documents handed on; dropped, ``skipped_<reason>`` for records
    that hold no document (WARC requests, non-HTML responses ...) and ``quarantined_<reason>`` for bad
    ones, which also go to ``on_bad`` (the quarantine, or an error in --strict mode). Tokens are the
    words of the raw content: HTML words for a web page still to be extracted.
    """

    name: ClassVar[str] = "read"

    def __init__(self, cfg: ReadConfig, on_bad: Callable[[Bad], None]) -> None:
        self.cfg = cfg
        self.on_bad = on_bad

    def batches(
        self, path: InputPath, source: str, counts: StageCounts, span: Span | None = None
    ) -> Iterator[pa.RecordBatch]:
        for item in read_input(path, source, self.cfg, span):
            if isinstance(item, Skip):
                counts.docs_in += 1
                counts.dropped[f"skipped_{item.reason}"] += 1
            elif isinstance(item, Bad):
                self.on_bad(item)
                counts.docs_in += item.records  # an unreadable Parquet row group stands for its rows
                counts.dropped[f"quarantined_{item.reason}"] += item.records
            else:
                if (item.column("raw_words").to_numpy() < 0).any():
                    item, _ = counted(item)  # documents that are text already: their words go on
                words = int(raw_words(item).sum())
                counts.docs_in += item.num_rows
                counts.docs_out += item.num_rows
                counts.tokens_in += words
                counts.tokens_out += words
                yield item


def raw_words(batch: pa.RecordBatch) -> np.ndarray:
    """Words of each document's raw content: the reader's count for web pages, else of its text."""
    raw = batch.column("raw_words").to_numpy()
    return np.where(raw >= 0, raw, word_counts(batch)) if (raw < 0).any() else raw
