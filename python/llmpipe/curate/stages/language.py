"""Keep documents in the configured languages, detected with a score (``lang``, ``lang_score`` columns).

Three backends: ``cld2`` (the default: Google's CLD2 from the ``pycld2`` wheel, 160+ languages; see
docs/languages.md), ``whatlang`` (trigram models compiled into the extension, 70 languages) and
``fasttext`` (any supervised fastText model: lid.176, GlotLID, OpenLID...). Labels are normalised
to ISO 639-3 plus script (``eng_Latn``, see :mod:`llmpipe.langcodes`); the keep list and the
per-language thresholds take ``eng`` (any script) or ``eng_Latn``. Kept documents are counted per
language in the funnel (``counters``: ``lang:eng_Latn``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmpipe import _core, langcodes
from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import Filter, StageCounts
from llmpipe.errors import ConfigError
from llmpipe.io.fs import not_a_file
from llmpipe.quality import FastTextModel

BACKENDS = ("cld2", "whatlang", "fasttext")


class Cld2:
    """Google's CLD2 (Chromium's compact language detector, 160+ languages, its tables compiled into the
    ``pycld2`` wheel, a core dependency). It reads the first :attr:`MAX_CHARS` characters of a text as
    plain text, best effort (a guess where CLD2 would say unknown); the score is the share of those
    characters in the top language, halved when CLD2 calls the answer unreliable (short or mixed text),
    so that the default ``min_score`` 0.65 drops such guesses as ``low_language_score``."""

    #: 99.4% of the answers on whole web documents, at twice the speed (bench/bench_language.py)
    MAX_CHARS = 2048
    #: CLD2 rejects control characters (C1 ones are common in mis-decoded cp1252 text): spaces instead
    #: (a regex: ``str.translate`` with a table took 0.27 ms per 2 KB prefix, 2% of a curate run)
    CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

    def __init__(self) -> None:
        try:
            import pycld2
        except ImportError:
            raise ConfigError(
                "language backend cld2 needs the pycld2 package (a dependency of llmpipe): "
                "pip install 'pycld2>=0.42', or set language.backend: whatlang"
            ) from None
        self._cld2 = pycld2
        names = dict(pycld2.LANGUAGES)
        #: the normalised labels CLD2 can answer
        self.labels = sorted({langcodes.normalize_cld2(names[n]) for n in pycld2.DETECTED_LANGUAGES})

    def detect(self, texts: pa.Array | pa.ChunkedArray) -> tuple[list[str], list[float]]:
        """Normalised label and score per text (UTF-8 bytes of each prefix straight from Arrow)."""
        detect, error = self._cld2.detect, self._cld2.error
        prefixes = _core.utf8_prefixes(*string_buffers(texts), self.MAX_CHARS)  # a null text: b""
        cache: dict[str, str] = {}
        codes, scores = [], []
        for raw in prefixes:
            try:
                reliable, _, details = detect(raw, isPlainText=True, bestEffort=True)
            except error:
                try:
                    text = self.CONTROLS.sub(" ", raw.decode("utf-8", "replace"))
                    reliable, _, details = detect(text, isPlainText=True, bestEffort=True)
                except error:  # still unreadable
                    codes.append("und_Zyyy")
                    scores.append(0.0)
                    continue
            _, code, percent, _ = details[0]
            label = cache.get(code) or cache.setdefault(code, langcodes.normalize_cld2(code))
            codes.append(label)
            scores.append(0.0 if label == "und_Zyyy" else percent / (100.0 if reliable else 200.0))
        return codes, scores


class LanguageFilter(Filter):
    """Language ID per document, then keep list and minimum score."""

    name: ClassVar[str] = "language"
    example_columns: ClassVar[tuple[str, ...]] = ("lang", "lang_score")

    @dataclass
    class Config:
        enabled: bool = True
        #: "cld2" (CLD2, 160+ languages), "whatlang" (70 languages, compiled into the extension) or
        #: "fasttext" (``model`` is a fastText .bin/.ftz classifier)
        backend: str = "cld2"
        model: str | None = None
        #: languages to keep: ISO 639-3 (``eng``, any script) or with a script (``srp_Latn``); an
        #: empty list keeps every language (only annotates)
        languages: list[str] = field(default_factory=lambda: ["eng"])
        #: minimum detector score (datatrove's LanguageFilter default is 0.65)
        min_score: float = 0.65
        #: per-language minimum scores (``eng`` or ``eng_Latn`` -> score), overriding ``min_score``
        thresholds: dict[str, float] = field(default_factory=dict)

    def __init__(self, cfg: Config) -> None:
        if cfg.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, not {cfg.backend!r}")
        for code in [*cfg.languages, *cfg.thresholds]:
            langcodes.check(code, "language")
        for code, s in [("min_score", cfg.min_score), *cfg.thresholds.items()]:
            if not 0.0 <= s <= 1.0:
                raise ValueError(f"{code}: a score threshold must be in [0, 1], not {s}")
        if cfg.backend == "fasttext":
            if not cfg.model:
                raise ValueError("model: the path of a fastText language-ID model (backend: fasttext)")
            if why := not_a_file(cfg.model):
                raise ValueError(f"model: {cfg.model} {why}")
        else:
            if cfg.model:
                raise ValueError("model is only read by backend: fasttext")
            if cfg.backend == "cld2":
                known = {label.partition("_")[0] for label in Cld2().labels} - {"und"}
            else:
                known = {langcodes.normalize(code).partition("_")[0] for code, _ in _core.language_codes()}
            unknown = sorted(c for c in cfg.languages if c.partition("_")[0] not in known)
            if unknown:
                raise ValueError(f"unknown language code(s) {unknown}; {cfg.backend} knows: {sorted(known)}")
        self.cfg = cfg
        self._decisions: dict[str, tuple[bool, float]] = {}

    @classmethod
    def from_config(cls, cfg: Config) -> LanguageFilter | None:
        return cls(cfg) if cfg.enabled else None

    @cached_property
    def fasttext(self) -> tuple[FastTextModel, list[str]]:
        """The model and its labels, normalised (loaded once per process, on first use). A model none
        of whose labels is a language (a quality classifier's ``__label__hq``) is a ConfigError: it
        would drop every document as ``other_language``."""
        m = FastTextModel.load(str(self.cfg.model))
        if not any(langcodes.is_language(label) for label in m.labels):
            shown = ", ".join(m.labels[:5]) + (", ..." if len(m.labels) > 5 else "")
            raise ConfigError(
                f"language.model: {self.cfg.model}: none of its labels ({shown}) is a language code, so "
                "every document would be dropped as other_language: give a fastText language-ID model "
                "(lid.176, GlotLID, OpenLID); a quality classifier goes in quality_model (format: fasttext)"
            )
        return m, [langcodes.normalize(label) for label in m.labels]

    @cached_property
    def cld2(self) -> Cld2:
        return Cld2()

    def detect(self, texts: pa.Array | pa.ChunkedArray) -> tuple[list[str], list[float]]:
        """Normalised language and score per text."""
        if self.cfg.backend == "cld2":
            return self.cld2.detect(texts)
        if self.cfg.backend == "fasttext":
            model, labels = self.fasttext
            ids, probs = model.predict_ids(texts, k=1)
            return (
                [labels[i[0]] if i else "und_Zyyy" for i in ids],
                [float(p[0]) if p else 0.0 for p in probs],
            )
        codes, scores = _core.detect_language(string_buffers(texts))
        cache: dict[str, str] = {}
        return [cache.get(c) or cache.setdefault(c, langcodes.normalize(c)) for c in codes], scores

    def annotate(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        codes, scores = self.detect(batch.column("text"))
        for name, col in (
            ("lang", pa.array(codes, pa.string())),
            ("lang_score", pa.array(scores, pa.float64())),
        ):
            i = batch.schema.get_field_index(name)
            batch = batch.set_column(i, name, col) if i >= 0 else batch.append_column(name, col)
        return batch

    def decision(self, lang: str) -> tuple[bool, float]:
        """(kept language?, its minimum score) for a normalised code; cached per code."""
        d = self._decisions.get(lang)
        if d is None:
            keep = not self.cfg.languages or any(langcodes.matches(lang, w) for w in self.cfg.languages)
            thr = self.cfg.thresholds
            score = thr.get(lang, thr.get(lang.partition("_")[0], self.cfg.min_score))
            d = self._decisions[lang] = (keep, score)
        return d

    def reasons(self, batch: pa.RecordBatch) -> Sequence[str | None]:
        # one decision per distinct code (a batch has a few dozen), then numpy over the documents,
        # not a Python loop over them
        langs = pc.dictionary_encode(batch.column("lang"))
        decisions = [self.decision(c) for c in langs.dictionary.to_pylist()]
        idx = langs.indices.to_numpy(zero_copy_only=False)
        keep = np.array([k for k, _ in decisions], dtype=bool)[idx]
        low = (
            batch.column("lang_score").to_numpy(zero_copy_only=False)
            < np.array([s for _, s in decisions])[idx]
        )
        out = np.full(batch.num_rows, None, dtype=object)
        out[keep & low] = "low_language_score"
        out[~keep] = "other_language"
        return out.tolist()

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        kept = super().run(batch, counts)
        if kept.num_rows:
            tally = pc.value_counts(kept.column("lang"))
            for lang, c in zip(
                tally.field("values").to_pylist(), tally.field("counts").to_pylist(), strict=True
            ):
                counts.counters[f"lang:{lang}"] += c
        return kept
