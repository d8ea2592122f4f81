"""What a reader yields: a document, a skipped record (holds no document), or a quarantined (bad) one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

#: the columns every curate batch carries; stages may add more (``lang``, ``lang_score`` ...)
DOC_SCHEMA = pa.schema(
    [
        ("id", pa.string()),  # stable document id: "<input>/<id from the record, or its position>"
        ("text", pa.string()),
        ("source", pa.string()),  # the input it came from
        ("position", pa.int64()),  # record index within that input: order key (source, position)
    ]
)
#: what a reader hands on: the document columns, its metadata as JSON, and the words of the raw content
#: (HTML words of a web page still to be extracted; -1 where ``text`` is already the document's text)
RAW_SCHEMA = DOC_SCHEMA.append(pa.field("meta", pa.string())).append(pa.field("raw_words", pa.int64()))


@dataclass(slots=True)
class Doc:
    id: str | None
    text: str
    meta: dict[str, Any] = field(default_factory=dict)
    #: for a web page: ``text`` is its HTML (main text still to be extracted) and this its
    #: whitespace-separated words; None: ``text`` is the document's text
    raw_words: int | None = None
    #: where in the input (e.g. "line 17"), for a quarantine record made after reading; None: its position
    location: str | None = None
    #: its position in the input (line or row index), when the reader knows it whatever the chunk
    position: int | None = None


@dataclass(slots=True)
class DocRun:
    """Documents of consecutive records read in one go (JSONL's fast path), as Arrow columns: ids
    already ``<source>/<id from the record, or its position>`` (before the repeat check), texts,
    positions and metadata as ``RAW_SCHEMA`` holds them."""

    ids: pa.StringArray
    texts: pa.StringArray
    positions: pa.Int64Array
    metas: pa.StringArray

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(slots=True)
class Skip:
    """A well-formed record that holds no document (a WARC request, a non-HTML response ...).

    Counted by the read stage as dropped ``skipped_<reason>``; not quarantined, since nothing is wrong.
    """

    reason: str


@dataclass(slots=True)
class Bad:
    reason: str  # short snake_case, e.g. invalid_json, truncated_gzip
    location: str  # e.g. "line 17", "byte 2048", "record 3"
    detail: str = ""
    snippet: str = ""
    #: how many input records this one stands for (all rows of an unreadable Parquet row group)
    records: int = 1

    def to_dict(self, source: str) -> dict[str, Any]:
        d: dict[str, Any] = {
            "source": source,
            "location": self.location,
            "reason": self.reason,
            "detail": self.detail[:500],
            "snippet": self.snippet[:200],
        }
        if self.records != 1:
            d["records"] = self.records
        return d
