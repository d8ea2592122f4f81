"""The language stage with a fastText model: label normalisation, keep list, thresholds, a curate run.

The model is a lid.176-style language ID (ISO 639-1 labels, ``__label__en``) trained by the
``fasttext`` package on even UDHR paragraphs; the documents are the odd ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import run_cli
from fasttext_oracle import train_supervised
from llmpipe import langcodes
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.stages.language import LanguageFilter
from test_fasttext_parity import TRAIN, udhr_paragraphs

ISO1 = {"eng": "en", "fra": "fr", "deu": "de", "spa": "es", "rus": "ru", "cmn": "zh", "pol": "pl"}


@pytest.fixture(scope="module")
def lid(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """(model path, test documents, their normalised languages) for the languages of ISO1."""
    train, test = udhr_paragraphs(data_dir)
    tmp = tmp_path_factory.mktemp("lid")
    lines = []
    for code, text in train:
        if code in ISO1:
            lines.append(f"__label__{ISO1[code]} {text}")
    (tmp / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = train_supervised(
        input=str(tmp / "train.txt"), dim=16, lr=0.5, minn=2, maxn=4, bucket=50_000, **{**TRAIN, "epoch": 50},
    )  # fmt: skip
    path = tmp / "lid.bin"
    model.save_model(str(path))
    docs, langs = [], []
    for code, text in test:
        if code in ISO1 and len(text) >= 80:
            docs.append(text)
            langs.append(langcodes.normalize(code))
    return path, docs, langs


def test_labels_are_normalised() -> None:
    assert langcodes.normalize("__label__en") == "eng_Latn"
    assert langcodes.normalize("__label__zh") == "cmn_Hani"
    assert langcodes.normalize("__label__als") == "gsw_Latn"
    assert langcodes.normalize("__label__srp_Latn") == "srp_Latn"
    assert langcodes.normalize("__label__sr") == "srp_Cyrl"
    assert langcodes.normalize("ukr") == "ukr_Cyrl"
    assert langcodes.matches("srp_Latn", "srp") and not langcodes.matches("srp_Latn", "srp_Cyrl")
    with pytest.raises(ValueError, match="not an ISO 639-3"):
        langcodes.check("english", "languages")


def test_stage_keep_list_and_per_language_threshold(lid: tuple[Path, list[str], list[str]]) -> None:
    path, docs, langs = lid
    batch = pa.record_batch(
        {
            "id": [str(i) for i in range(len(docs))],
            "text": docs,
            "source": ["udhr"] * len(docs),
            "position": list(range(len(docs))),
        }
    )
    cfg = LanguageFilter.Config(
        backend="fasttext", model=str(path), languages=["eng", "fra_Latn"], min_score=0.3,
        thresholds={"fra": 1.01 - 1e-9},
    )  # fmt: skip
    with pytest.raises(ValueError, match="must be in"):
        LanguageFilter(cfg)
    cfg.thresholds = {"fra": 0.999999}
    stage = LanguageFilter(cfg)
    counts = StageCounts("language")
    kept = stage.run(batch, counts)
    counts.check()
    got = kept.column("lang").to_pylist()
    assert set(got) <= {"eng_Latn", "fra_Latn"}
    acc = sum(g == y for g, y in zip(stage.detect(batch.column("text"))[0], langs, strict=True)) / len(docs)
    assert acc >= 0.9, acc
    n_eng = sum(1 for y in langs if y == "eng_Latn")
    assert 0.8 * n_eng <= got.count("eng_Latn") <= n_eng + 2
    # the near-certain threshold for French drops most French documents as low-score
    assert counts.dropped["low_language_score"] > 0
    assert counts.counters["lang:eng_Latn"] == got.count("eng_Latn")
    assert counts.dropped["other_language"] >= 0.8 * sum(1 for y in langs if y[:3] not in ("eng", "fra"))


def test_curate_run_with_fasttext_backend(lid: tuple[Path, list[str], list[str]], tmp_path: Path) -> None:
    path, docs, langs = lid
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs)))
    cfg = tmp_path / "run.yaml"
    off = "{enabled: false}"
    cfg.write_text(
        "pack: {seq_len: 64, samples_per_shard: 200}\ntokenizer: {vocab_size: 400}\n"
        f"language: {{backend: fasttext, model: {path}, languages: [deu, spa, rus], min_score: 0.3}}\n"
        + "".join(f"{s}: {off}\n" for s in ("gopher_repetition", "gopher_quality", "c4", "fineweb"))
    )
    out = tmp_path / "shards"
    run_cli("curate", str(src), "--out", str(out), "--config", str(cfg))
    stats = json.loads((out / "stats.json").read_text())
    st = next(s for s in stats["stages"] if s["name"] == "language")
    per_lang = {k.removeprefix("lang:"): v for k, v in st["counters"].items() if k.startswith("lang:")}
    assert set(per_lang) == {"deu_Latn", "spa_Latn", "rus_Cyrl"}, st
    assert sum(per_lang.values()) == st["docs_out"]
    for lang in per_lang:
        assert per_lang[lang] >= 0.8 * langs.count(lang), (lang, per_lang)
    assert st["dropped"]["other_language"] >= 0.8 * sum(1 for y in langs if y not in per_lang)


def test_quality_stage_scores_with_a_fasttext_classifier(data_dir: Path, tmp_path: Path) -> None:
    """format: fasttext scores a document by the probability of ``label``, as the package gives it."""
    from llmpipe.curate.stages.quality_model import QualityModelFilter
    from llmpipe.errors import ConfigError
    from quality_data import reference_docs, web_docs

    pos = [" ".join(d.split()) for d in reference_docs(data_dir, per_source=8)]
    neg = [" ".join(d.split()) for d in web_docs(data_dir)[:80] if d.strip()]
    train = tmp_path / "q.txt"
    train.write_text(
        "".join(f"__label__hq {t}\n" for t in pos[::2]) + "".join(f"__label__lq {t}\n" for t in neg[::2])
    )
    model = train_supervised(input=str(train), dim=16, wordNgrams=2, bucket=50_000, **{**TRAIN, "epoch": 5})
    path = tmp_path / "q.bin"
    model.save_model(str(path))
    docs = pos[1::2] + neg[1::2]
    batch = pa.record_batch({"id": [str(i) for i in range(len(docs))], "text": docs})
    stage = QualityModelFilter(
        QualityModelFilter.Config(enabled=True, model=str(path), format="fasttext", label="__label__hq")
    )
    scores = stage.prepare(batch).column("score").to_pylist()
    labels, probs = model.predict(docs, k=-1)
    want = [float(p[list(lab).index("__label__hq")]) for lab, p in zip(labels, probs, strict=True)]
    assert max(abs(a - b) for a, b in zip(scores, want, strict=True)) <= 1e-5
    auc_pos = sum(s > 0.5 for s in scores[: len(pos[1::2])]) / len(pos[1::2])
    assert auc_pos >= 0.8, auc_pos
    wrong = QualityModelFilter(
        QualityModelFilter.Config(enabled=True, model=str(path), format="fasttext", label="__label__good")
    )
    with pytest.raises(ConfigError, match="not a label"):
        wrong.prepare(batch)
    with pytest.raises(ValueError, match="label"):
        QualityModelFilter(QualityModelFilter.Config(enabled=True, model=str(path), format="fasttext"))
    # the fastText model read as an llmpipe one: the error says which format it is
    with pytest.raises(ConfigError, match="not an llmpipe quality model .*: it is a fastText model; score with it by "
                       "format: fasttext"):  # fmt: skip
        QualityModelFilter(QualityModelFilter.Config(enabled=True, model=str(path))).prepare(batch)

    # `quality calibrate` scores with the stage: --format fasttext --label, the threshold of these scores
    from llmpipe.curate.stages.quality_model import calibrate

    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    argv = ["quality", "calibrate", str(src), "--model", str(path), "--target-retention", "0.5"]
    c = run_cli(*argv, "--format", "fasttext", "--label", "__label__hq")
    words = np.array([len(t.split()) for t in docs])
    thr = calibrate(np.array(scores), words, 0.5)  # the stage's scores: what a curate run would keep
    assert f"threshold {thr:.6f} keeps" in c.stdout, (thr, c.stdout)
    assert f"format: fasttext, label: '__label__hq', threshold: {thr:.6f}" in c.stdout
    for extra, message in [
        ([], "not an llmpipe quality model (bad magic): it is a fastText model; score with it by --format "
             "fasttext --label LABEL"),
        (["--format", "fasttext"], "--format fasttext needs --label"),
        (["--format", "fasttext", "--label", "__label__good"], "--label: '__label__good' is not a label of"),
        (["--label", "__label__hq"], "--label is only read with --format fasttext"),
    ]:  # fmt: skip
        p = run_cli(*argv, *extra, check=False)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and message in lines[0], (extra, p.stderr)


def test_a_model_without_language_labels_is_one_line(data_dir: Path, tmp_path: Path) -> None:
    """A fastText model whose labels are no languages (a quality classifier's ``__label__hq`` and
    ``__label__lq``) as the language model: one line saying so, not every document dropped as
    other_language."""
    from llmpipe.errors import ConfigError
    from quality_data import reference_docs, web_docs

    pos = [" ".join(d.split()) for d in reference_docs(data_dir, per_source=8)][:150]
    neg = [" ".join(d.split()) for d in web_docs(data_dir)[:200] if d.strip()][:150]
    train = tmp_path / "q.txt"
    train.write_text("".join(f"__label__hq {t}\n" for t in pos) + "".join(f"__label__lq {t}\n" for t in neg))
    path = tmp_path / "q.bin"
    train_supervised(input=str(train), dim=8, bucket=20_000, **TRAIN).save_model(str(path))
    stage = LanguageFilter(LanguageFilter.Config(backend="fasttext", model=str(path), languages=["eng"]))
    batch = pa.record_batch({"id": ["0"], "text": [pos[0]], "source": ["s"], "position": [0]})
    with pytest.raises(
        ConfigError, match=r"none of its labels \(__label__(hq|lq), __label__(hq|lq)\) is a language"
    ):
        stage.run(batch, StageCounts("language"))
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in pos[:20]))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"language: {{backend: fasttext, model: {path}}}\n")
    p = run_cli("curate", str(src), "--out", str(tmp_path / "o"), "--config", str(cfg), check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith(f"llmpipe: error: language.model: {path}: none of its labels"), p.stderr
    assert langcodes.is_language("__label__en") and langcodes.is_language("__label__srp_Latn")
    assert not langcodes.is_language("__label__hq") and not langcodes.is_language("__label__und")
