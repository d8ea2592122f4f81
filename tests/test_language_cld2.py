"""The default language backend (CLD2 from the pycld2 wheel) on real UDHR text (nltk udhr.zip).

Languages the former default, whatlang, cannot name are labelled right; CLD2's codes map onto
llmpipe's ISO 639-3 + script labels (the table is data in llmpipe.langcodes); keep list and
per-language thresholds work as before; without pycld2 the run stops with one line naming the fix.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from llmpipe import _core, langcodes
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.stages.language import Cld2, LanguageFilter
from llmpipe.errors import ConfigError
from test_language_settings import batch_of, udhr_docs

# languages whatlang does not know, with their UDHR translation and encoding
NEW = {
    "swa_Latn": ("Swahili_Kiswahili-Latin1", "cp1252"), "isl_Latn": ("Icelandic_Yslenska-Latin1", "cp1252"),
    "eus_Latn": ("Basque_Euskara-Latin1", "cp1252"), "mlg_Latn": ("Malagasy-Latin1", "cp1252"),
    "gle_Latn": ("IrishGaelic_Gaeilge-Latin1", "cp1252"), "mlt_Latn": ("Maltese-UTF8", "utf-8"),
    "kaz_Cyrl": ("Kazakh-UTF8", "utf-8"), "xho_Latn": ("Xhosa-Latin1", "cp1252"),
}  # fmt: skip


def test_default_backend_labels_languages_whatlang_lacks(data_dir: Path) -> None:
    whatlang = {c for c, _ in _core.language_codes()}
    docs, want = [], []
    for label, (name, enc) in NEW.items():
        assert label[:3] not in whatlang
        d = udhr_docs(data_dir, name, enc, n=5)
        docs += d
        want += [label] * len(d)
    batch = batch_of(docs, None)
    assert LanguageFilter.Config().backend == "cld2"
    got, scores = LanguageFilter(LanguageFilter.Config(languages=[])).detect(batch.column("text"))
    wrong = [(w, g) for w, g in zip(want, got, strict=True) if w != g]
    assert len(wrong) <= 1, wrong
    assert min(scores) >= 0.65
    # whatlang, still selectable, names none of them
    old = LanguageFilter(LanguageFilter.Config(backend="whatlang", languages=[])).detect(
        batch.column("text")
    )[0]
    assert not set(old) & set(NEW)

    # keep list and per-language thresholds: Swahili kept, Icelandic asked for a near-certain score
    stage = LanguageFilter(
        LanguageFilter.Config(languages=["swa", "isl_Latn"], thresholds={"isl": 0.9999}, min_score=0.5)
    )
    counts = StageCounts("language")
    kept = stage.run(batch, counts)
    counts.check()
    assert kept.column("lang").to_pylist() == ["swa_Latn"] * 5
    assert counts.counters == {"lang:swa_Latn": 5}
    assert counts.dropped["low_language_score"] == 5  # Icelandic below 0.9999
    assert counts.dropped["other_language"] == len(docs) - 10
    with pytest.raises(ValueError, match="unknown language.*cld2 knows"):
        LanguageFilter(LanguageFilter.Config(languages=["gsw"]))


def test_cld2_codes_map_onto_iso639_3_and_script() -> None:
    labels = Cld2().labels
    assert len(labels) >= 160
    assert all(re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", x) for x in labels), labels
    cases = {
        "en": "eng_Latn", "iw": "heb_Hebr", "jw": "jav_Latn", "zh": "cmn_Hani", "zh-Hant": "cmn_Hani",
        "fa": "pes_Arab", "no": "nob_Latn", "ab": "abk_Cyrl", "sr": "srp_Cyrl", "xx-Bugi": "bug_Bugi",
        "haw": "haw_Latn", "un": "und_Zyyy", "zzp": "und_Zyyy", "ms": "msa_Latn",
    }  # fmt: skip
    assert {c: langcodes.normalize_cld2(c) for c in cases} == cases
    # where whatlang knows the language too, both backends give the same label
    whatlang = {langcodes.normalize(c) for c, _ in _core.language_codes()}
    assert whatlang <= set(labels), whatlang - set(labels)


def test_control_characters_become_spaces_before_cld2(data_dir: Path) -> None:
    # CLD2 refuses C0/C1 controls (a mis-decoded cp1252 page has them): exactly those turn into spaces
    every = "".join(map(chr, range(0x200)))
    controls = {*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)}
    assert Cld2.CONTROLS.sub(" ", every) == "".join(" " if i in controls else chr(i) for i in range(0x200))
    english = " ".join(udhr_docs(data_dir, "English-Latin1", "cp1252", n=3))
    texts = [english, english.replace(" ", " \x85\x01", 20), "\x00\x9f" * 10]
    got, scores = Cld2().detect(batch_of(texts, None).column("text"))
    assert got[:2] == ["eng_Latn", "eng_Latn"] and min(scores[:2]) >= 0.65
    assert got[2] == "und_Zyyy" and scores[2] == 0.0


def test_without_pycld2_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shim = tmp_path / "shim" / "pycld2"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named pycld2')\n")
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "a", "text": "Everyone has the right to life, liberty and security."}) + "\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")])}
    proc = run_cli("curate", str(src), "--out", str(tmp_path / "out"), check=False, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'pycld2" in lines[0] and "backend: whatlang" in lines[0], lines
    monkeypatch.setitem(sys.modules, "pycld2", None)
    with pytest.raises(ConfigError, match="pycld2"):
        LanguageFilter(LanguageFilter.Config())
    assert LanguageFilter(LanguageFilter.Config(backend="whatlang")).cfg.backend == "whatlang"


def test_cld2_prefixes_are_arrows_code_point_slices(data_dir: Path) -> None:
    """CLD2 reads the first MAX_CHARS characters of each text, cut in Rust (``utf8_prefixes``):
    the bytes Arrow's ``utf8_slice_codeunits`` gives, on UDHR text in several scripts."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from llmpipe.buffers import string_buffers

    texts: list[str | None] = []
    for name, enc in (
        ("Kazakh-UTF8", "utf-8"),
        ("Maltese-UTF8", "utf-8"),
        ("Swahili_Kiswahili-Latin1", "cp1252"),
    ):
        texts += udhr_docs(data_dir, name, enc, n=20)
    texts += ["Chinese_Mandarin-UTF8 中文 " * 200, "😀" * 3000, "", None]
    for arr in (pa.array(texts, pa.string()), pa.array(texts, pa.large_string()).slice(3)):
        for n in (0, 1, 7, 100, Cld2.MAX_CHARS):
            want = pc.utf8_slice_codeunits(arr, 0, n).cast(pa.large_binary()).to_pylist()
            assert _core.utf8_prefixes(*string_buffers(arr), n) == [w or b"" for w in want], n
