"""Language identification on the UDHR translations (nltk), documents of at least 200 characters.

"The 30 most common languages": the 30 languages with the most speakers (L1 + L2, Ethnologue 2023
order) among those the detector supports and the nltk UDHR set holds in a readable encoding
(Telugu, Thai and Malayalam have no readable UDHR file there and are skipped for the next ones).
"""

from __future__ import annotations

import zipfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
from llmpipe import _core
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.stages.language import LanguageFilter

LANGS = {
    "eng": "English-Latin1", "cmn": "Chinese_Mandarin-UTF8", "hin": "Hindi-UTF8", "spa": "Spanish-Latin1",
    "fra": "French_Francais-Latin1", "ara": "Arabic_Alarabia-Arabic", "ben": "Bengali-UTF8",
    "por": "Portuguese_Portugues-Latin1", "rus": "Russian-UTF8", "ind": "Indonesian-Latin1",
    "deu": "German_Deutsch-Latin1", "jpn": "Japanese_Nihongo-UTF8", "mar": "Marathi-UTF8",
    "tur": "Turkish_Turkce-UTF8", "tam": "Tamil-UTF8", "vie": "Vietnamese-UTF8", "kor": "Korean_Hankuko-UTF8",
    "pes": "Farsi_Persian-UTF8", "jav": "Javanese-Latin1", "ita": "Italian-Latin1", "guj": "Gujarati-UTF8",
    "kan": "Kannada-UTF8", "pol": "Polish-Latin2", "ukr": "Ukrainian-UTF8", "pan": "Punjabi_Panjabi-UTF8",
    "mya": "Burmese_Myanmar-UTF8", "tgl": "Filipino_Tagalog-Latin1", "ron": "Romanian-Latin2",
    "nld": "Dutch_Nederlands-Latin1", "uzb": "Uzbek-Latin1",
}  # fmt: skip
ENCODINGS = {"UTF8": "utf-8", "Latin1": "latin-1", "Latin2": "iso8859-2", "Arabic": "cp1256"}


def udhr_docs(data_dir: Path) -> tuple[list[str], list[str]]:
    """Each translation cut into consecutive documents of at least 200 characters (whole lines)."""
    docs, labels = [], []
    with zipfile.ZipFile(data_dir / "reference" / "nltk" / "udhr.zip") as z:
        for code, name in LANGS.items():
            # the files are cut at 10 kB, sometimes inside a character: drop that partial character
            text = z.read(f"udhr/{name}").decode(ENCODINGS[name.rsplit("-", 1)[1]], errors="ignore")
            cur = ""
            for line in text.splitlines():
                cur = (cur + "\n" + line).strip()
                if len(cur) >= 200:
                    docs.append(cur)
                    labels.append(code)
                    cur = ""
    return docs, labels


def test_udhr_accuracy(data_dir: Path) -> None:
    docs, labels = udhr_docs(data_dir)
    assert len(set(labels)) == 30 and len(docs) > 500
    supported = {c for c, _ in _core.language_codes()}
    assert set(LANGS) <= supported
    got, scores = _core.detect_language(docs)
    acc = sum(g == y for g, y in zip(got, labels, strict=True)) / len(docs)
    misses = Counter((y, g) for g, y in zip(got, labels, strict=True) if g != y)
    assert acc >= 0.95, f"accuracy {acc:.3f}; misses {misses.most_common(5)}"
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_language_stage_keeps_configured_languages(data_dir: Path) -> None:
    docs, labels = udhr_docs(data_dir)
    batch = pa.record_batch(
        {
            "id": [str(i) for i in range(len(docs))],
            "text": docs,
            "source": ["udhr"] * len(docs),
            "position": list(range(len(docs))),
        }
    )
    stage = LanguageFilter(LanguageFilter.Config(languages=["eng", "fra"], min_score=0.5))
    counts = StageCounts("language")
    kept = stage.run(batch, counts)
    counts.check()
    assert set(kept.column("lang").to_pylist()) <= {"eng_Latn", "fra_Latn"}
    assert min(kept.column("lang_score").to_pylist()) >= 0.5
    expected = sum(1 for y in labels if y in ("eng", "fra"))
    assert 0.9 * expected <= kept.num_rows <= expected + 2
    assert counts.dropped["other_language"] > 0
    assert "lang" in counts.examples["other_language"][0]
