"""Quality filtering from Python: datatrove-compatible heuristics, language ID, PII, the classifier.

    >>> from llmpipe.quality import evaluate
    >>> [v.keep for v in evaluate(["too short"])]
    [False]

:class:`FastTextModel` reads fastText classifiers (language ID such as lid.176 or GlotLID, quality
classifiers such as DCLM's) and predicts as the ``fasttext`` package does.

Every filter runs in Rust (``llmpipe._core``), one call per batch with the GIL released. The filters
and their thresholds are datatrove 0.9's (Gopher quality and repetition, C4, FineWeb) with the same
reason strings; words are split as datatrove splits English (spaCy's rules, ported).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmpipe import _core
from llmpipe.buffers import Texts, string_buffers
from llmpipe.config import from_dict
from llmpipe.errors import ConfigError


@dataclass
class GopherRepetitionConfig:
    """datatrove ``GopherRepetitionFilter``; a threshold of null (or 0) turns its rule off."""

    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    #: [n, max fraction of characters in the most frequent n-gram]
    top_n_grams: list[tuple[int, float]] = field(default_factory=lambda: [(2, 0.2), (3, 0.18), (4, 0.16)])
    #: [n, max fraction of characters in duplicated n-grams]
    dup_n_grams: list[tuple[int, float]] = field(
        default_factory=lambda: [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)]
    )


@dataclass
class GopherQualityConfig:
    """datatrove ``GopherQualityFilter``; null (or 0) turns a rule off."""

    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3.0
    max_avg_word_length: float | None = 10.0
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2
    stop_words: list[str] = field(
        default_factory=lambda: ["the", "be", "to", "of", "and", "that", "have", "with"]
    )


@dataclass
class C4Config:
    """datatrove ``C4QualityFilter`` (line split, as C4); -1 turns a count rule off."""

    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True


@dataclass
class FineWebConfig:
    """datatrove ``FineWebQualityFilter``; empty ``stop_chars`` = datatrove's terminal punctuation."""

    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    stop_chars: list[str] = field(default_factory=list)
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3


@dataclass
class PiiConfig:
    emails: bool = True
    ip_addresses: bool = True
    phone_numbers: bool = True
    email_placeholder: str = "<EMAIL>"
    ip_placeholder: str = "<IP_ADDRESS>"
    phone_placeholder: str = "<PHONE_NUMBER>"


@dataclass
class QualityConfig:
    """Which heuristic filters :func:`evaluate` runs (null = off), in FineWeb's order."""

    gopher_repetition: GopherRepetitionConfig | None = field(default_factory=GopherRepetitionConfig)
    gopher_quality: GopherQualityConfig | None = field(default_factory=GopherQualityConfig)
    c4: C4Config | None = field(default_factory=C4Config)
    fineweb: FineWebConfig | None = field(default_factory=FineWebConfig)


def core_json(cfg: Any, base: type | None = None) -> str:
    """The JSON the Rust core takes: the fields of ``base`` (default: the config's own type)."""
    names = {f.name for f in dataclasses.fields(base or type(cfg))}
    d = {k: v for k, v in dataclasses.asdict(cfg).items() if k in names}
    for key in ("top_n_grams", "dup_n_grams"):
        if key in d:
            d[key] = [[int(n), float(f)] for n, f in d[key]]
    return json.dumps(d)


@dataclass
class Verdict:
    """One document: ``keep``; ``reasons`` as ``filter:reason``; ``text`` after C4's line cleaning."""

    keep: bool
    reasons: list[str]
    text: str


def evaluate(
    texts: Sequence[str], config: QualityConfig | dict[str, Any] | None = None, all_reasons: bool = True
) -> list[Verdict]:
    """Run the heuristic filters on ``texts``: per document keep, the reasons, the cleaned text.

    With ``all_reasons`` (the default) every filter runs even after one drops the document, so the
    reasons list all that apply; otherwise evaluation stops at the first.
    """
    if config is None:
        config = QualityConfig()
    elif isinstance(config, dict):
        config = from_dict(QualityConfig, config, "quality")
    payload = {
        name: json.loads(core_json(sub)) if sub is not None else None
        for name, sub in ((f.name, getattr(config, f.name)) for f in dataclasses.fields(config))
    }
    texts = list(texts)
    reasons, cleaned = _core.quality_heuristics(texts, json.dumps(payload), all_reasons)
    return [
        Verdict(keep=not r, reasons=list(r), text=c if c is not None else t)
        for t, r, c in zip(texts, reasons, cleaned, strict=True)
    ]


def detect_language(texts: Sequence[str]) -> tuple[list[str], list[float]]:
    """ISO 639-3 code and confidence per text (whatlang's models, compiled into the extension)."""
    return _core.detect_language(list(texts))


def redact_pii(
    texts: Sequence[str], config: PiiConfig | None = None
) -> tuple[list[str], list[dict[str, int]]]:
    """Texts with e-mails, public IPs and phone numbers replaced, and what was replaced per text."""
    texts = list(texts)
    new, counts = _core.pii_redact(texts, core_json(config or PiiConfig()))
    kinds = ("email", "ipv4", "ipv6", "phone")
    return (
        [n if n is not None else t for t, n in zip(texts, new, strict=True)],
        [dict(zip(kinds, c, strict=True)) for c in counts],
    )


QualityModel = _core.QualityModel


class FastTextModel:
    """A supervised fastText model (``.bin`` or quantized ``.ftz``), predicted in Rust.

        >>> m = FastTextModel.load("lid.176.ftz")  # doctest: +SKIP
        >>> m.predict(["Bonjour tout le monde"], k=1)  # doctest: +SKIP
        ([['__label__fr']], [[0.98...]])

    Labels and probabilities are those of the ``fasttext`` package's ``predict`` on the same text
    (its own reader, hashing and losses, reimplemented); a text is one line, newlines count as
    spaces (as datatrove's fastText filters do). One call per batch, the GIL released.
    """

    def __init__(self, inner: _core.FastTextModel) -> None:
        self._inner = inner
        self.labels: list[str] = inner.labels

    @classmethod
    def load(cls, path: str | Path) -> FastTextModel:
        """Read a model file; a missing, truncated or foreign file raises :class:`InputError`."""
        return cls(_core.FastTextModel.load(str(path)))

    @property
    def loss(self) -> str:
        """``softmax``, ``hs``, ``ns`` or ``ova``."""
        return self._inner.loss

    @property
    def dim(self) -> int:
        return self._inner.dim

    def predict_ids(
        self, texts: Texts, k: int = 1, threshold: float = 0.0
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Like :meth:`predict`, labels as indices into :attr:`labels` (no string per document)."""
        if k == 0 or k < -1:
            raise ConfigError(f"k must be >= 1 (or -1 for every label), not {k}")
        return self._inner.predict(string_buffers(texts), k, threshold)

    def predict(
        self, texts: Texts, k: int = 1, threshold: float = 0.0
    ) -> tuple[list[list[str]], list[list[float]]]:
        """Per text, the top ``k`` labels (all with ``k=-1``) with probability >= ``threshold``."""
        ids, probs = self.predict_ids(texts, k, threshold)
        labels = self.labels
        return [[labels[i] for i in row] for row in ids], probs


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve (rank statistic, ties counted half)."""
    import numpy as np

    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC AUC needs both classes")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
