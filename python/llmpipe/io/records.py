"""What a reader yields: a document, a skipped record (holds no document), or a quarantined (bad) one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Doc:
    id: str | None
    text: str
    meta: dict[str, Any] = field(default_factory=dict)
    #: whitespace-separated words of the raw content before extraction (HTML); None: ``text`` is raw
    raw_words: int | None = None
    #: where in the input (e.g. "line 17"), for a quarantine record made after reading; None: its position
    location: str | None = None


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
