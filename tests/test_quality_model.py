"""The hashed n-gram quality classifier: held-out ROC AUC on real text, the CLI, calibration in a run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from llmpipe.curate.stages.quality_model import calibrate
from llmpipe.quality import QualityModel, roc_auc
from quality_data import reference_docs, web_docs, webtext_docs


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> tuple[list[str], list[str]]:
    """Positive: books, nltk abc/state_union/inaugural, Python docs; negative: crawl text, nltk webtext."""
    pos = reference_docs(data_dir, per_source=200)
    neg = [d for d in web_docs(data_dir) if d.strip()] + webtext_docs(data_dir)
    return pos, neg


def test_held_out_auc(corpus: tuple[list[str], list[str]]) -> None:
    pos, neg = (list(x) for x in corpus)
    rng = random.Random(0)
    rng.shuffle(pos)
    rng.shuffle(neg)
    hp, hn = len(pos) // 5, len(neg) // 5
    model = QualityModel.train(pos[hp:], neg[hn:], json.dumps({"bits": 18, "epochs": 5, "seed": 1}))
    scores = model.score(pos[:hp] + neg[:hn])
    auc = roc_auc(scores, [1] * hp + [0] * hn)
    assert auc >= 0.9, auc
    # deterministic: the same seed gives the same model
    again = QualityModel.train(pos[hp:], neg[hn:], json.dumps({"bits": 18, "epochs": 5, "seed": 1}))
    assert again.score(pos[:5]) == model.score(pos[:5])


def test_roc_auc_against_a_brute_force_count() -> None:
    rng = random.Random(3)
    s = [rng.choice([0.1, 0.2, 0.5, 0.9]) for _ in range(60)]
    y = [rng.randint(0, 1) for _ in range(60)]
    pairs = [(a, b) for a, ya in zip(s, y, strict=True) if ya for b, yb in zip(s, y, strict=True) if not yb]
    brute = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)
    assert abs(roc_auc(s, y) - brute) < 1e-12


def test_calibrate_picks_the_word_quantile() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    words = np.array([10, 10, 10, 10, 60])
    assert calibrate(scores, words, 0.2) == 0.8  # 20 of 100 words
    assert calibrate(scores, words, 0.4) == 0.6
    assert calibrate(scores, words, 1.0) == 0.5


def test_calibration_sample_and_threshold_bounds_in_the_config() -> None:
    """``sample_docs`` below 1 (which calibrated on no document, or on all but the last few) and a
    threshold that is not a finite number (nan kept every document) are refused with one line."""
    from llmpipe.curate.settings import CurateConfig
    from llmpipe.errors import ConfigError

    for section, message in [
        ({"sample_docs": 0}, "quality_model: sample_docs must be at least 1, not 0"),
        ({"sample_docs": -4}, "quality_model: sample_docs must be at least 1, not -4"),
        ({"threshold": float("nan")}, "quality_model: threshold must be a finite number, not nan"),
        ({"threshold": float("inf")}, "quality_model: threshold must be a finite number, not inf"),
    ]:
        with pytest.raises(ConfigError, match=message):
            CurateConfig.from_mapping({"quality_model": {"enabled": True, **section}})
    cfg = CurateConfig.from_mapping({"quality_model": {"sample_docs": 1, "threshold": -1}})
    assert cfg.stages["quality_model"].sample_docs == 1


def test_cli_train_calibrate_and_a_run_at_target_retention(
    tmp_path: Path, data_dir: Path, corpus: tuple[list[str], list[str]]
) -> None:
    pos_file = tmp_path / "pos.jsonl"
    pos_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus[0]))
    books = data_dir / "reference" / "books" / "wonderland.txt"
    neg = [
        str(data_dir / "web" / "cc-en-head-0091.jsonl"),
        str(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz"),
    ]
    model = tmp_path / "model.bin"
    p = run_cli(
        "quality", "train", "--positive", str(pos_file), str(books), "--negative", *neg,
        "--out", str(model), "--bits", "18", "--chunk-lines", "60",
    )  # fmt: skip
    assert model.is_file() and "held-out ROC AUC" in p.stdout, p.stdout
    auc = float(p.stdout.split("held-out ROC AUC")[1].split()[0])
    assert auc >= 0.9, p.stdout

    src = data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz"
    c = run_cli("quality", "calibrate", "--model", str(model), "--target-retention", "0.4", str(src))
    assert "threshold" in c.stdout

    target = 0.4
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "pack: {seq_len: 128, samples_per_shard: 500}\ntokenizer: {vocab_size: 600}\n"
        "language: {enabled: false}\nc4: {enabled: false}\nfineweb: {enabled: false}\n"
        f"quality_model: {{enabled: true, model: {model}, target_retention: {target}, target_of: stage}}\n"
    )
    out = tmp_path / "shards"
    run_cli("curate", str(src), "--out", str(out), "--config", str(cfg))
    stats = json.loads((out / "stats.json").read_text())
    st = next(s for s in stats["stages"] if s["name"] == "quality_model")
    kept = st["tokens_out"] / st["tokens_in"]
    assert abs(kept - target) <= 0.1 * target, (kept, st)
    assert set(st["dropped"]) == {"low_quality_score"}

    # the default: the target is a fraction of the run's input words (what the funnel's first stage read)
    run_target = 0.1
    cfg.write_text(
        cfg.read_text().replace(
            f"target_retention: {target}, target_of: stage", f"target_retention: {run_target}"
        )
    )
    out2 = tmp_path / "shards-input"
    run_cli("curate", str(src), "--out", str(out2), "--config", str(cfg))
    stats2 = json.loads((out2 / "stats.json").read_text())
    st2 = next(s for s in stats2["stages"] if s["name"] == "quality_model")
    run_kept = st2["tokens_out"] / stats2["stages"][0]["tokens_in"]
    assert abs(run_kept - run_target) <= 0.1 * run_target, (run_kept, st2)


def test_char_ngrams_beat_words_alone_on_little_data(data_dir: Path) -> None:
    """Two paragraphs per side, Ukrainian vs Russian (UDHR): most test words are unseen, their
    character n-grams are not; held-out sentences are scored by both feature sets."""
    from test_fasttext_parity import udhr_paragraphs

    train, test = udhr_paragraphs(data_dir)
    pos = [t for c, t in train if c == "ukr"][1:3]
    neg = [t for c, t in train if c == "rus"][1:3]
    tp = [t.split(".")[0] for c, t in test if c == "ukr"]
    tn = [t.split(".")[0] for c, t in test if c == "rus"]
    aucs = {}
    for chars in ([0, 0], [3, 5]):
        cfg = {"bits": 18, "epochs": 10, "seed": 1, "char_ngrams": chars}
        model = QualityModel.train(pos, neg, json.dumps(cfg))
        aucs[tuple(chars)] = roc_auc(model.score(tp + tn), [1] * len(tp) + [0] * len(tn))
    assert aucs[(3, 5)] > aucs[(0, 0)] and aucs[(3, 5)] >= 0.99, aucs


def test_cli_trains_from_labelled_jsonl(tmp_path: Path, corpus: tuple[list[str], list[str]]) -> None:
    pos, neg = corpus
    labelled = tmp_path / "labels.jsonl"
    rows = [{"text": t, "label": "hq"} for t in pos[:300]] + [{"text": t, "label": "lq"} for t in neg[:300]]
    random.Random(0).shuffle(rows)
    labelled.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tmp_path / "m.bin"
    p = run_cli(
        "quality", "train", "--labelled", str(labelled), "--positive-label", "hq",
        "--out", str(model), "--bits", "16", "--holdout", "0.2",
    )  # fmt: skip
    assert "trained on 240 positive and 240 negative" in p.stdout, p.stdout
    auc = float(p.stdout.split("held-out ROC AUC")[1].split()[0])
    assert auc >= 0.9, p.stdout
    assert QualityModel.load(str(model)).score(["x"])[0] > 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no label"}\n')
    r = run_cli("quality", "train", "--labelled", str(bad), "--out", str(model), check=False)
    assert r.returncode != 0 and "bad.jsonl:1: expected a JSON object with text and label" in r.stderr
    assert "Traceback" not in r.stderr
