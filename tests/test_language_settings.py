"""Per-language settings of the heuristic filters, chosen by the ``lang`` column of the language stage."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyarrow as pa
import pytest
from llmpipe.config import from_dict
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.stages.heuristics import GopherQuality
from llmpipe.curate.stages.language import LanguageFilter
from llmpipe.errors import ConfigError


def udhr_docs(data_dir: Path, name: str, encoding: str, n: int = 6) -> list[str]:
    """``n`` documents of consecutive lines of one UDHR translation."""
    with zipfile.ZipFile(data_dir / "reference" / "nltk" / "udhr.zip") as z:
        lines = [
            line for line in z.read(f"udhr/{name}").decode(encoding, errors="ignore").splitlines() if line
        ]
    size = len(lines) // n
    return ["\n".join(lines[i * size : (i + 1) * size]) for i in range(n)]


def batch_of(docs: list[str], lang: str | None) -> pa.RecordBatch:
    cols = {
        "id": [str(i) for i in range(len(docs))],
        "text": docs,
        "source": ["udhr"] * len(docs),
        "position": list(range(len(docs))),
    }
    if lang is not None:
        cols["lang"] = [lang] * len(docs)
    return pa.record_batch(cols)


def run(stage: GopherQuality, batch: pa.RecordBatch) -> StageCounts:
    counts = StageCounts(stage.name)
    stage.run(batch, counts)
    counts.check()
    return counts


def test_french_and_chinese_use_their_settings_english_the_run_config(data_dir: Path) -> None:
    fra = udhr_docs(data_dir, "French_Francais-Latin1", "latin-1")
    cmn = udhr_docs(data_dir, "Chinese_Mandarin-UTF8", "utf-8")
    eng = udhr_docs(data_dir, "English-Latin1", "latin-1")
    english_only = GopherQuality(from_dict(GopherQuality.Config, {"per_language": False}))
    per_lang = GopherQuality(GopherQuality.Config())

    # English stop words and word rules on French and Chinese: most documents fail
    assert run(english_only, batch_of(fra, "fra_Latn")).dropped["gopher_enough_stop_words"] >= 5
    assert run(english_only, batch_of(cmn, "cmn_Hani")).docs_out <= 1
    # their own settings: French stop words, no word-count rules for a script without spaces
    assert run(per_lang, batch_of(fra, "fra_Latn")).docs_out >= 5
    assert run(per_lang, batch_of(cmn, "cmn_Hani")).docs_out >= 5
    # no language column, or English: the run's configuration, as before
    assert run(per_lang, batch_of(fra, None)).dropped == run(english_only, batch_of(fra, None)).dropped
    assert (
        run(per_lang, batch_of(eng, "eng_Latn")).docs_out == run(english_only, batch_of(eng, None)).docs_out
    )

    # a mixed batch: each document by its own language, results in input order
    mixed = pa.record_batch(
        {
            "id": [str(i) for i in range(12)],
            "text": fra + cmn,
            "source": ["udhr"] * 12,
            "position": list(range(12)),
            "lang": ["fra_Latn"] * 6 + ["cmn_Hani"] * 6,
        }
    )
    assert per_lang.reasons(mixed) == list(per_lang.reasons(batch_of(fra, "fra_Latn"))) + list(
        per_lang.reasons(batch_of(cmn, "cmn_Hani"))
    )


def test_a_user_directory_adds_and_replaces_files(data_dir: Path, tmp_path: Path) -> None:
    fra = udhr_docs(data_dir, "French_Francais-Latin1", "latin-1")
    (tmp_path / "fra_Latn.yaml").write_text("gopher_quality: {stop_words: [zzz], min_stop_words: 1}\n")
    stage = GopherQuality(GopherQuality.Config(language_settings=str(tmp_path)))
    assert run(stage, batch_of(fra, "fra_Latn")).dropped["gopher_enough_stop_words"] == len(fra)

    (tmp_path / "fra_Latn.yaml").write_text("gopher_quality: {stop_wordz: [le]}\n")
    with pytest.raises(ConfigError, match="stop_wordz"):
        GopherQuality(GopherQuality.Config(language_settings=str(tmp_path)))
    (tmp_path / "fra_Latn.yaml").write_text("c4: {}\n")
    with pytest.raises(ConfigError, match="unknown section"):
        GopherQuality(GopherQuality.Config(language_settings=str(tmp_path)))
    (tmp_path / "fra_Latn.yaml").unlink()
    (tmp_path / "french.yaml").write_text("gopher_quality: {}\n")
    with pytest.raises(ConfigError, match="fra_Latn.yaml"):
        GopherQuality(GopherQuality.Config(language_settings=str(tmp_path)))


def test_whatlang_backend_writes_normalised_codes(data_dir: Path) -> None:
    fra = udhr_docs(data_dir, "French_Francais-Latin1", "latin-1")
    stage = LanguageFilter(
        LanguageFilter.Config(backend="whatlang", languages=["fra"], thresholds={"fra_Latn": 0.1})
    )
    counts = StageCounts("language")
    kept = stage.run(batch_of(fra, None), counts)
    assert set(kept.column("lang").to_pylist()) == {"fra_Latn"}
    assert counts.counters["lang:fra_Latn"] == kept.num_rows == len(fra)
    with pytest.raises(ValueError, match="unknown language"):
        LanguageFilter(LanguageFilter.Config(backend="whatlang", languages=["swa"]))
    with pytest.raises(ValueError, match="backend"):
        LanguageFilter(LanguageFilter.Config(backend="cld3"))


def test_builtin_settings_parse_as_pyyaml_does_and_each_load_is_a_copy() -> None:
    """The built-in files are parsed once per process with libyaml: the same data as PyYAML's own
    parser, and a caller that changes what ``load`` gave does not change the next ``load``."""
    import yaml
    from llmpipe.curate import language_settings

    files = sorted(language_settings.BUILTIN.glob("*.yaml"))
    assert files
    first = language_settings.load()
    assert first == {p.stem: yaml.safe_load(p.read_text()) for p in files}
    some = next(iter(first.values()))
    some.clear()
    assert language_settings.load() == {p.stem: yaml.safe_load(p.read_text()) for p in files}
