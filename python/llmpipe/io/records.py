"""What a reader yields: a document or a quarantined (bad) record with its reason and location."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Doc:
    id: str | None
    text: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Bad:
    reason: str  # short snake_case, e.g. invalid_json, truncated_gzip
    location: str  # e.g. "line 17", "byte 2048", "record 3"
    detail: str = ""
    snippet: str = ""

    def to_dict(self, source: str) -> dict[str, Any]:
        return {
            "source": source,
            "location": self.location,
            "reason": self.reason,
            "detail": self.detail[:500],
            "snippet": self.snippet[:200],
        }
