"""The stages of ``llmpipe curate``, in pipeline order (the order of the funnel)."""

from __future__ import annotations

from llmpipe.curate.stages.exact_dedup import ExactDedup
from llmpipe.curate.stages.length import LengthFilter
from llmpipe.curate.stages.normalize import Normalize

#: extract -> language -> heuristics -> exact dedup -> near dedup -> model score -> PII; then tokenize, pack
STAGES: list[type] = [
    Normalize,
    LengthFilter,
    ExactDedup,
]
