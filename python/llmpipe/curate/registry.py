"""The stages of ``llmpipe curate``, in pipeline order (the order of the funnel)."""

from __future__ import annotations

from llmpipe.curate.stage import DROPS_SCHEMA, TOKENS_SCHEMA, WORDS, Stage
from llmpipe.curate.stages.c4 import C4
from llmpipe.curate.stages.classifier import Classifier
from llmpipe.curate.stages.decontaminate import Decontaminate
from llmpipe.curate.stages.exact_dedup import ExactDedup
from llmpipe.curate.stages.heuristics import FineWeb, GopherQuality, GopherRepetition
from llmpipe.curate.stages.language import LanguageFilter
from llmpipe.curate.stages.length import LengthFilter
from llmpipe.curate.stages.line_dedup import LineDedup
from llmpipe.curate.stages.near_dedup import NearDedup
from llmpipe.curate.stages.normalize import Normalize
from llmpipe.curate.stages.pii import PiiRedact
from llmpipe.curate.stages.quality_model import QualityModelFilter
from llmpipe.curate.stages.semantic_dedup import SemanticDedup
from llmpipe.curate.stages.substring_dedup import SubstringDedup
from llmpipe.curate.stages.url_filter import UrlFilter
from llmpipe.io.records import RAW_SCHEMA

#: URL filter (before extraction) -> extract -> language -> heuristics -> exact dedup -> near dedup
#: -> line dedup -> substring dedup -> model score -> decontamination -> PII; then tokenize, pack
STAGES: list[type[Stage]] = [
    UrlFilter,
    Normalize,
    LengthFilter,
    LanguageFilter,
    GopherRepetition,
    GopherQuality,
    C4,
    FineWeb,
    ExactDedup,
    NearDedup,
    LineDedup,
    SubstringDedup,
    QualityModelFilter,
    Classifier,
    SemanticDedup,
    Decontaminate,
    PiiRedact,
]


def pipeline_columns() -> frozenset[str]:
    """The columns a document batch carries or a stage writes: the reader's, ``words``, the tokens, the
    drop tables' and every stage's ``example_columns`` (``lang``, ``lang_score``): a classifier's score
    may not take one of their names (it would replace that column)."""
    cols = {*RAW_SCHEMA.names, WORDS, *TOKENS_SCHEMA.names, *DROPS_SCHEMA.names}
    return frozenset(cols.union(*(getattr(s, "example_columns", ()) for s in STAGES)))
