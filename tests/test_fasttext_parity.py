"""llmpipe's fastText predictor against the ``fasttext`` package on models this test trains.

Supervised language ID on the UDHR translations (nltk): even paragraphs train, odd ones test. Every
model kind fastText writes for classification is covered (softmax and hierarchical softmax, with and
without word n-grams, one-vs-all, char n-grams on and off, quantized .ftz with and without norms and
pruning); on every test text the labels must be identical and the probabilities within 1e-5.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fasttext_oracle import train_supervised
from llmpipe.errors import InputError, LlmpipeError
from llmpipe.quality import FastTextModel

LANGS = {
    "eng": "English-Latin1", "fra": "French_Francais-Latin1", "deu": "German_Deutsch-Latin1",
    "spa": "Spanish-Latin1", "ita": "Italian-Latin1", "nld": "Dutch_Nederlands-Latin1",
    "por": "Portuguese_Portugues-Latin1", "pol": "Polish-Latin2", "ces": "Czech-UTF8",
    "rus": "Russian-UTF8", "ukr": "Ukrainian-UTF8", "cmn": "Chinese_Mandarin-UTF8",
    "jpn": "Japanese_Nihongo-UTF8", "tur": "Turkish_Turkce-UTF8", "vie": "Vietnamese-UTF8",
    "hin": "Hindi-UTF8", "fin": "Finnish_Suomi-Latin1", "swe": "Swedish_Svenska-Latin1",
}  # fmt: skip
# the thread count is the oracle's (fasttext_oracle.py: fewer than 11 leaves part of its matrix unset)
TRAIN: dict[str, Any] = dict(verbose=0, epoch=10)
ENCODINGS = {"UTF8": "utf-8", "Latin1": "latin-1", "Latin2": "iso8859-2"}

# texts that exercise the reader's corners: empty, only spaces, a literal </s>, label tokens,
# unknown scripts, control whitespace, NUL
EDGE_TEXTS = [
    "",
    "   ",
    "human rights </s> droits de l'homme",
    "__label__eng __label__xyz everyone has the right",
    "\u0001\u0002 ☃☃☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "a\tb\x0bc\x0cd\re\x00f",
    "ÀÉÎÕÜ ßøå ąęł",
]


def udhr_paragraphs(data_dir: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(language, paragraph) pairs: even paragraphs of each translation, then the odd ones."""
    train, test = [], []
    with zipfile.ZipFile(data_dir / "reference" / "nltk" / "udhr.zip") as z:
        for code, name in LANGS.items():
            text = z.read(f"udhr/{name}").decode(ENCODINGS[name.rsplit("-", 1)[1]], errors="ignore")
            paras = [" ".join(p.split()) for p in text.split("\n") if len(p.split()) >= 3]
            for i, p in enumerate(paras):
                (train if i % 2 == 0 else test).append((code, p))
    return train, test


def udhr_split(data_dir: Path) -> tuple[list[str], list[str]]:
    """(training lines ``__label__xxx text``, test texts)."""
    train, test = udhr_paragraphs(data_dir)
    return [f"__label__{c} {p}" for c, p in train], [p for _, p in test]


@pytest.fixture(scope="module")
def corpus(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    train, test = udhr_split(data_dir)
    assert len(train) > 300 and len(test) > 300
    path = tmp_path_factory.mktemp("ft") / "train.txt"
    path.write_text("\n".join(train) + "\n", encoding="utf-8")
    return path, test + EDGE_TEXTS


def assert_parity(oracle: Any, ours: FastTextModel, texts: list[str], k: int, threshold: float = 0.0) -> None:
    want_labels, want_probs = oracle.predict(texts, k=k, threshold=threshold)
    got_labels, got_probs = ours.predict(texts, k=k, threshold=threshold)
    assert len(got_labels) == len(texts)
    for t, wl, wp, gl, gp in zip(texts, want_labels, want_probs, got_labels, got_probs, strict=True):
        assert list(wl) == gl, f"labels differ on {t[:60]!r}: {list(wl)} vs {gl}"
        np.testing.assert_allclose(gp, np.asarray(wp, dtype=np.float64), rtol=0, atol=1e-5, err_msg=t[:60])


MODELS = {
    "softmax": dict(loss="softmax", wordNgrams=1, minn=0, maxn=0),
    "softmax_bigrams_subwords": dict(loss="softmax", wordNgrams=2, minn=2, maxn=4),
    "hs": dict(loss="hs", wordNgrams=1, minn=2, maxn=4),
    "hs_trigrams": dict(loss="hs", wordNgrams=3, minn=0, maxn=0),
    "ova_bigrams_subwords": dict(loss="ova", wordNgrams=2, minn=3, maxn=5),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bin_models_match_fasttext(name: str, corpus: tuple[Path, list[str]], tmp_path: Path) -> None:
    train, texts = corpus
    model = train_supervised(input=str(train), dim=16, bucket=50_000, **TRAIN, **{"lr": 0.5, **MODELS[name]})
    path = tmp_path / f"{name}.bin"
    model.save_model(str(path))
    ours = FastTextModel.load(path)
    assert ours.labels == list(model.labels)
    assert ours.loss == MODELS[name]["loss"]
    assert_parity(model, ours, texts, k=1)
    assert_parity(model, ours, texts, k=3)
    assert_parity(model, ours, texts[:60], k=-1, threshold=0.01)


@pytest.mark.parametrize(
    "qargs",
    [dict(qnorm=False), dict(qnorm=True, cutoff=5000, retrain=False, dsub=4)],
    ids=["plain", "qnorm_cutoff"],
)
def test_quantized_models_match_fasttext(
    qargs: dict[str, Any], corpus: tuple[Path, list[str]], tmp_path: Path
) -> None:
    train, texts = corpus
    model = train_supervised(
        input=str(train), dim=16, lr=0.5, bucket=50_000, **TRAIN,
        loss="softmax", wordNgrams=2, minn=2, maxn=4,
    )  # fmt: skip
    model.quantize(input=str(train), **qargs)
    path = tmp_path / "model.ftz"
    model.save_model(str(path))
    ours = FastTextModel.load(path)
    assert_parity(model, ours, texts, k=1)
    assert_parity(model, ours, texts, k=2)


def test_quantized_output_matrix_matches_fasttext(data_dir: Path, tmp_path: Path) -> None:
    """``qout`` needs at least 256 labels: one per UDHR translation (every readable file)."""
    lines, texts = [], []
    with zipfile.ZipFile(data_dir / "reference" / "nltk" / "udhr.zip") as z:
        for name in sorted(z.namelist()):
            enc = ENCODINGS.get(name.rsplit("-", 1)[-1])
            if enc is None or name.endswith("/"):
                continue
            label = name.split("/")[-1].rsplit("-", 1)[0]
            paras = [" ".join(p.split()) for p in z.read(name).decode(enc, errors="ignore").split("\n")]
            paras = [p for p in paras if len(p.split()) >= 3][:12]
            lines += [f"__label__{label} {p}" for p in paras[::2]]
            texts += paras[1::2][:1]
    train = tmp_path / "train.txt"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = train_supervised(input=str(train), dim=8, lr=0.5, minn=2, maxn=3, bucket=20_000, **TRAIN)
    assert len(model.labels) >= 256
    model.quantize(input=str(train), qnorm=True, qout=True, retrain=False)
    path = tmp_path / "qout.ftz"
    model.save_model(str(path))
    ours = FastTextModel.load(path)
    assert_parity(model, ours, texts + EDGE_TEXTS, k=3)


def test_predicts_arrow_columns_and_newlines(corpus: tuple[Path, list[str]], tmp_path: Path) -> None:
    import pyarrow as pa

    train, texts = corpus
    model = train_supervised(input=str(train), dim=8, **TRAIN)
    path = tmp_path / "m.bin"
    model.save_model(str(path))
    ours = FastTextModel.load(path)
    col = pa.chunked_array([pa.array(texts[:50]), pa.array(texts[50:100])])
    assert ours.predict(col) == ours.predict(texts[:100])
    # a document is one line: a newline counts as a space (fastText itself rejects "\n")
    doc = texts[0] + "\n" + texts[1]
    assert ours.predict([doc]) == ours.predict([texts[0] + " " + texts[1]])


def test_bad_model_files_give_one_line_errors(corpus: tuple[Path, list[str]], tmp_path: Path) -> None:
    train, _ = corpus
    model = train_supervised(input=str(train), dim=8, **TRAIN)
    good = tmp_path / "good.bin"
    model.save_model(str(good))
    raw = good.read_bytes()
    cases = {
        "truncated": (raw[: len(raw) // 2], "truncated fastText model"),
        "magic": (b"\x00\x01\x02\x03" + raw[4:], "not a fastText model"),
        "version": (raw[:4] + (99).to_bytes(4, "little") + raw[8:], "version 99 is not supported"),
        "header_only": (raw[:6], "truncated fastText model"),
    }
    for name, (data, message) in cases.items():
        bad = tmp_path / f"{name}.bin"
        bad.write_bytes(data)
        with pytest.raises(InputError, match=message) as err:
            FastTextModel.load(bad)
        assert "\n" not in str(err.value) and str(bad) in str(err.value)
    with pytest.raises(LlmpipeError, match="No such file"):
        FastTextModel.load(tmp_path / "missing.bin")
    with pytest.raises(LlmpipeError, match="k must be"):
        FastTextModel.load(good).predict(["x"], k=0)
