"""The four heuristic filters against datatrove (the oracle) on real crawl and reference documents.

datatrove splits English words with spaCy (``spacy.blank("en")``); llmpipe ports that tokenizer to
Rust, so the test also checks the word split itself against spaCy.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from llmpipe import _core
from llmpipe.quality import C4Config, FineWebConfig, GopherQualityConfig, QualityConfig, core_json, evaluate
from quality_data import reference_docs, web_docs

MAX_CHARS = 30_000  # keeps datatrove's side of the test to about a minute


@pytest.fixture(scope="module")
def docs(data_dir: Path) -> list[str]:
    out = [d for d in web_docs(data_dir) + reference_docs(data_dir, per_source=25) if d.strip()]
    out = [d for d in out if len(d) <= MAX_CHARS]
    assert len(out) > 700
    return out


def _datatrove(flt: object, texts: list[str]) -> list[tuple[str | None, str]]:
    from datatrove.data import Document

    out = []
    for i, t in enumerate(texts):
        doc = Document(text=t, id=str(i))
        r = flt.filter(doc)  # type: ignore[attr-defined]
        out.append((None if r is True else r[1], doc.text))
    return out


def _check(name: str, ref: list[str | None], mine: list[str | None]) -> None:
    n = len(ref)
    agree = sum((a is None) == (b is None) for a, b in zip(ref, mine, strict=True))
    both = [(a, b) for a, b in zip(ref, mine, strict=True) if a is not None and b is not None]
    assert agree / n >= 0.99, f"{name}: keep/drop agreement {agree}/{n}"
    wrong = [(a, b) for a, b in both if a != b]
    assert not wrong, f"{name}: different reasons {wrong[:5]}"
    # each filter must actually decide something on this data, both ways
    assert 0 < sum(r is None for r in ref) < n, name


def test_words_match_spacy(docs: list[str]) -> None:
    import spacy

    nlp = spacy.blank("en")
    sample = docs[::4]
    mine = _core.english_words(sample)
    diff = [
        i
        for i, (d, m) in enumerate(zip(sample, mine, strict=True))
        if m != [t.text.strip() for t in nlp(d) if t.text.strip()]
    ]
    assert len(diff) <= len(sample) // 100, f"{len(diff)} of {len(sample)} documents split differently"


@pytest.mark.parametrize("name", ["gopher_quality", "gopher_repetition", "fineweb"])
def test_filter_matches_datatrove(name: str, docs: list[str]) -> None:
    from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter

    flt = {
        "gopher_quality": GopherQualityFilter,
        "gopher_repetition": GopherRepetitionFilter,
        "fineweb": FineWebQualityFilter,
    }[name]()
    ref = [r for r, _ in _datatrove(flt, docs)]
    mine = _core.quality_filter(
        name, docs, core_json(getattr(QualityConfig(), name))
    )  # the pipeline's values
    _check(name, ref, mine)


def test_c4_matches_datatrove_including_cleaned_text(docs: list[str]) -> None:
    from datatrove.pipeline.filters import C4QualityFilter

    ref = _datatrove(C4QualityFilter(), docs)
    reasons, cleaned = _core.quality_c4(docs, core_json(C4Config()))
    _check("c4", [r for r, _ in ref], reasons)
    kept_both = [(t, c) for (r, t), c in zip(ref, cleaned, strict=True) if r is None and c is not None]
    same = sum(t == c for t, c in kept_both)
    assert same / len(kept_both) >= 0.99, f"cleaned text equal for {same}/{len(kept_both)}"
    # the curate stage's call: after a filter memoized the documents' words (C4 then takes each
    # line's words from them), the texts come back as one Arrow column, equal to the above
    _core.quality_filter("gopher_quality", docs, core_json(GopherQualityConfig()))
    reasons2, offs, data, changed = _core.quality_c4_column(docs, core_json(C4Config()))
    assert reasons2 == reasons
    col = pa.LargeStringArray.from_buffers(len(docs), pa.py_buffer(offs), pa.py_buffer(data)).to_pylist()
    assert col == [d if c is None else c for d, c in zip(docs, cleaned, strict=True)]
    assert changed == sum(c is not None and c != d for d, c in zip(docs, cleaned, strict=True)) > 0
    # FineWeb on rewritten texts (words memoized by C4, not split again) decides as datatrove does
    from datatrove.pipeline.filters import FineWebQualityFilter

    rewritten = [c for d, c in zip(docs, cleaned, strict=True) if c is not None and c != d][::2]
    mine = _core.quality_filter("fineweb", rewritten, core_json(FineWebConfig()))
    _check("fineweb", [r for r, _ in _datatrove(FineWebQualityFilter(), rewritten)], mine)


def test_evaluate_reports_every_reason_and_config_is_respected(docs: list[str]) -> None:
    sample = docs[:200]
    verdicts = evaluate(sample)
    gq = _core.quality_filter("gopher_quality", sample, "{}")
    for v, r in zip(verdicts, gq, strict=True):
        assert (f"gopher_quality:{r}" in v.reasons) == (r is not None)
        assert v.keep == (not v.reasons)
    # off: no gopher_quality reasons at all; a stricter threshold drops more
    off = evaluate(sample, QualityConfig(gopher_quality=None))
    assert not any(r.startswith("gopher_quality:") for v in off for r in v.reasons)
    strict = evaluate(
        sample,
        {"gopher_quality": {"min_doc_words": 400}, "c4": None, "fineweb": None, "gopher_repetition": None},
    )
    assert sum(not v.keep for v in strict) > sum(r is not None for r in gq)


def test_bad_config_is_a_clear_error() -> None:
    from llmpipe.errors import ConfigError

    with pytest.raises(ConfigError, match="gopher_quality"):
        evaluate(["x"], {"gopher_quality": {"min_words": 3}})
    with pytest.raises(ConfigError, match="unknown field"):
        _core.quality_filter("fineweb", ["x"], '{"bogus": 1}')
    assert core_json(QualityConfig().fineweb).startswith("{")
