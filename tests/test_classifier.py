"""Transformer classifiers and semantic dedup in `llmpipe curate`, with tiny random models built here.

Oracles: ``transformers.pipeline("text-classification")`` for the scores, a brute-force all-pairs cosine
(embeddings computed here with the HF model, not by the stage) for the semantic-dedup groups."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from hf_tiny import crawl_texts, save_classifier, save_encoder, tokenizer
from llmpipe.curate.settings import CurateConfig
from llmpipe.curate.steps import segments_of

INPUTS = ("cc-main-2019-30-extracted.jsonl.gz", "cc-en-head-0091.jsonl", "cc-en-head-0174.jsonl")
SMALL = (
    "pack:\n  seq_len: 64\n  samples_per_shard: 2000\n  val_fraction: 0.05\ntokenizer:\n  vocab_size: 300\n"
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    tok = tokenizer(data_dir)
    out = {
        "clf": save_classifier(root / "clf", tok, ["low", "high"]),
        "reg": save_classifier(root / "reg", tok, None, seed=1),
        "enc": save_encoder(root / "enc", tok),
    }
    # an encoder saved where a classifier is expected: the wrong head
    out["headless"] = save_encoder(root / "headless", tok)
    # a classifier whose tokenizer has more tokens than the model embeds
    out["mismatch"] = save_classifier(root / "mismatch", tok, ["low", "high"])
    tok.add_tokens([f"extra{i}" for i in range(3000)])
    tok.save_pretrained(out["mismatch"])
    return out


def _pipeline_scores(model: Path, texts: list[str], label: str | None) -> np.ndarray:
    from transformers import pipeline

    p = pipeline("text-classification", model=str(model), truncation=True, top_k=None, device="cpu")
    res = p(texts)
    if label is None:  # regression: the raw output
        p2 = pipeline("text-classification", model=str(model), truncation=True, device="cpu")
        return np.array([r["score"] for r in p2(texts, function_to_apply="none")])
    return np.array([next(d["score"] for d in r if d["label"] == label) for r in res])


def test_scores_equal_the_pipeline(models: dict[str, Path], data_dir: Path, tmp_path: Path) -> None:
    """Batched by length (batches of 4, sorted within windows), the scores are the pipeline's, in order."""
    from llmpipe.curate.stages import hf_models
    from llmpipe.curate.stages.classifier import ClassifierModel, ClassifierModelConfig, scores_of

    texts = crawl_texts(data_dir, 48)
    assert max(len(t.split()) for t in texts) > 200  # real documents, longer than the 64 tokens kept
    keys = tmp_path / "k.keys.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}), keys)
    for name, label, score in (("clf", "high", "probability"), ("reg", None, "regression")):
        cfg = ClassifierModelConfig(model=str(models[name]), label=label, score=score, batch_size=4)
        m = ClassifierModel(cfg)
        path = hf_models.run_model_file(m.digested(), keys, tmp_path / "cache")
        mine = scores_of(hf_models.read_result(path), m.head)
        ref = _pipeline_scores(models[name], texts, label)
        assert np.abs(mine - ref).max() < 1e-5, name
        assert ref.std() > 0.01, "the tiny model must tell texts apart"
        # the second call reads the cache
        assert hf_models.run_model_file(m.digested(), keys, tmp_path / "cache") == path

    # padded to a step of widths (what a GPU run does, GPU_WIDTH_STEP): the padding is masked, the scores stay;
    # short documents too, so that several widths occur
    loaded = hf_models.Loaded(
        ClassifierModel(ClassifierModelConfig(model=str(models["clf"]), label="high", batch_size=4)).spec
    )
    mixed = texts[:16] + [" ".join(t.split()[:n]) for n, t in zip(range(2, 50, 3), texts[:16], strict=True)]
    exact = loaded.run(mixed)
    # a file is tokenized and scored a window (WINDOW_BATCHES batches) at a time, with the same scores
    one = hf_models.Loaded(replace(loaded.spec, batch_size=1))
    sizes: list[int] = []
    encode = one.encode
    one.encode = lambda t: (sizes.append(len(t)), encode(t))[1]  # type: ignore[method-assign]
    assert np.abs(one.run(pa.chunked_array([mixed])) - exact).max() < 1e-5
    assert sizes == [hf_models.WINDOW_BATCHES, hf_models.WINDOW_BATCHES], sizes
    widths: list[int] = []
    forward = loaded.model.forward
    loaded.model.forward = lambda **kw: (widths.append(kw["input_ids"].shape[1]), forward(**kw))[1]
    loaded.width_step = 24  # the tiny tokenizer keeps 64 tokens: widths 24, 48 and 64 (the cap)
    assert np.abs(loaded.run(mixed) - exact).max() < 1e-5
    assert set(widths) <= {24, 48, 64} and len(set(widths)) > 1, widths

    # on CPU a batch ends before it pads more than CPU_MAX_PADDING of its tokens; every document once
    ids = loaded.encode(mixed)
    batches = loaded.batches(ids)
    assert sorted(int(j) for b in batches for j in b) == list(range(len(mixed)))
    for b in batches:
        n = [len(ids[j]) for j in b]
        assert len(n) <= 4 and (len(n) == 1 or len(n) * max(n) - sum(n) <= hf_models.CPU_MAX_PADDING * sum(n))
    assert any(len(b) < 4 for b in batches[:-1]) and any(len(b) == 4 for b in batches)


def _curate(inputs: list[str], out: Path, cfg: Path, *extra: str, env: dict[str, str] | None = None) -> int:
    args = ("curate", *inputs, "--out", str(out), "--config", str(cfg), "--quiet", *extra)
    return run_cli(*args, check=env is None, env=env).returncode


def _files(out: Path) -> dict[str, str]:
    """The run's outputs (not its hidden work and cache directories) -> sha256."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


def _stage(stats: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(s for s in stats["stages"] if s["name"] == name)


def test_curate_classifier_and_semantic_dedup(
    models: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    """Target retention keeps the best-scored half of the words (exactly the documents >= the calibrated
    threshold); a fixed threshold drops what scores below it; the funnel adds up; the histograms count
    every document; the score columns hold the scores;
    --workers 1 and 2 and a run killed while scoring then re-run write the same bytes."""
    inputs = [str(data_dir / "web" / n) for n in INPUTS]
    # the regression model's fixed threshold: its median score on the raw documents of the largest input
    reg_thr = float(np.median(_pipeline_scores(models["reg"], crawl_texts(data_dir, 1000), None)))
    cfg = tmp_path / "c.yaml"
    body = (
        f"classifier:\n  - model: {models['clf']}\n    label: high\n    name: edu\n"
        "    target_retention: 0.5\n    target_of: stage\n    batch_size: 8\n"
        f"  - model: {models['reg']}\n    score: regression\n    name: reg\n    threshold: {reg_thr!r}\n"
        f"semantic_dedup:\n  enabled: true\n  model: {models['enc']}\n  threshold: 0.999\n  clusters: 3\n"
    )
    cfg.write_text(SMALL + body)
    one, two = tmp_path / "one", tmp_path / "two"
    _curate(inputs, one, cfg, "--workers", "1", "--keep-work")
    stats = json.loads((one / "stats.json").read_text())
    c = _stage(stats, "classifier")
    assert c["docs_in"] == c["docs_out"] + sum(c["dropped"].values()) and set(c["dropped"]) <= {
        "low_edu",
        "low_reg",
    }
    assert sum(v for k, v in c["counters"].items() if k.startswith("edu [")) == c["docs_in"]
    assert sum(v for k, v in c["counters"].items() if k.startswith("reg [")) == c["docs_in"]
    edu_kept = c["tokens_in"] - c["dropped_tokens"]["low_edu"]
    assert 0.4 < edu_kept / c["tokens_in"] < 0.6  # about half the words entering the stage
    names = [x["name"] for x in stats["stages"]]
    assert names.index("classifier") + 1 == names.index("semantic_dedup")
    sd = _stage(stats, "semantic_dedup")
    assert sd["docs_in"] == c["docs_out"] and sd["docs_in"] == sd["docs_out"] + sum(sd["dropped"].values())
    work = one / ".llmpipe-work"
    thr = json.loads(next(work.glob("global*/thresholds.json")).read_text())["edu"]
    k = next(int(p.name[len("global") :]) for p in work.glob("global*") if (p / "thresholds.json").exists())
    scores = pa.concat_tables(
        [pq.read_table(p) for p in sorted((work / f"keys{k}").glob("*.edu.scores.parquet"))]
    )
    # the segment that applies the classifier's drops (global stage k) first
    segments = segments_of(CurateConfig.load(cfg).build_stages())
    seg = next(j for j, sg in enumerate(segments) if k in [g for g, _ in sg.after])
    after = pa.concat_tables(  # a part whose documents were all dropped has the plain schema
        [
            t
            for p in sorted((work / f"seg{seg}").glob("??????.arrow"))
            if (t := pa.ipc.open_file(p).read_all()).num_rows
        ]
    )
    kept = set(after.column("id").to_pylist())
    s = dict(zip(scores.column("id").to_pylist(), scores.column("score").to_pylist(), strict=True))
    assert after.schema.field("edu").metadata == {b"llmpipe.classifier": b"1"}
    got = dict(zip(after.column("id").to_pylist(), after.column("edu").to_pylist(), strict=True))
    assert got == {i: s[i] for i in kept}  # the score column is each document's score
    # the regression model's fixed threshold drops what it scores below it (of what the first kept)
    reg = pa.concat_tables(
        [pq.read_table(p) for p in sorted((work / f"keys{k}").glob("*.reg.scores.parquet"))]
    )
    r = dict(zip(reg.column("id").to_pylist(), reg.column("score").to_pylist(), strict=True))
    low_reg = {i for i in r if s[i] >= thr and r[i] < reg_thr}
    assert c["dropped"].get("low_reg", 0) == len(low_reg)
    assert (
        low_reg and kept == {i for i in r if s[i] >= thr and r[i] >= reg_thr} and len(kept) == c["docs_out"]
    )
    _curate(inputs, two, cfg, "--workers", "2")
    assert _files(one) == _files(two)
    # killed (SIGKILL) after scoring the first part, then re-run: the same bytes
    four = tmp_path / "four"
    assert _curate(inputs, four, cfg, "--workers", "1", env={"LLMPIPE_FAULT_AFTER": "classifier edu#0"}) != 0
    assert not (four / "stats.json").exists()
    _curate(inputs, four, cfg, "--workers", "1")
    assert _files(one) == _files(four)


def _brute_groups(emb: np.ndarray, thr: float) -> list[set[int]]:
    n = len(emb)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    sims = emb @ emb.T
    for i in range(n):
        for j in range(i + 1, n):
            if sims[i, j] >= thr:
                parent[find(j)] = find(i)
    groups: dict[int, set[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), set()).add(i)
    return [g for g in groups.values() if len(g) > 1]


def _embed(model: Path, texts: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, m = AutoTokenizer.from_pretrained(model), AutoModel.from_pretrained(model).eval()
    out = []
    for t in texts:  # one at a time: no padding
        enc = tok(t, truncation=True, return_tensors="pt")
        with torch.no_grad():
            h = m(**enc).last_hidden_state[0].mean(0)
        out.append(torch.nn.functional.normalize(h, dim=0).numpy())
    return np.stack(out)


def test_semantic_dedup_groups(
    models: dict[str, Path], data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted reorderings are grouped; the groups are the brute-force all-pairs cosine groups; the
    kept one is the best-scored; a threshold sweep reads the cached embeddings."""
    from llmpipe.curate.stage import RunContext
    from llmpipe.curate.stages import hf_models
    from llmpipe.curate.stages.semantic_dedup import SemanticDedup

    base = [" ".join(t.split()[:50]) for t in crawl_texts(data_dir, 30)]
    rng = random.Random(0)

    def variant(t: str) -> str:
        w = t.replace(",", "").split()
        i = rng.randrange(len(w) - 1)
        w[i], w[i + 1] = w[i + 1], w[i]
        return " ".join(w)

    texts = base + [variant(base[i]) for i in range(0, 20, 2)]
    ids = [f"d{i:03d}" for i in range(len(texts))]
    score = pa.field("edu", pa.float64(), metadata={b"llmpipe.classifier": b"1"})
    scores = [rng.random() for _ in texts]
    batch = pa.record_batch(
        [pa.array(ids), pa.array(texts), pa.array(scores, pa.float64())],
        schema=pa.schema([("id", pa.string()), ("text", pa.string()), score]),
    )
    keys = []
    for j, sl in enumerate((slice(0, 17), slice(17, None))):  # two key files
        cfg = SemanticDedup.Config(
            enabled=True, model=str(models["enc"]), threshold=0.998, clusters=1, batch_size=4
        )
        keys.append(tmp_path / f"{j}.keys.parquet")
        pq.write_table(
            SemanticDedup(cfg).prepare(batch.slice(sl.start, (sl.stop or len(texts)) - sl.start)), keys[-1]
        )
    emb = _embed(models["enc"], texts)
    run = RunContext(0, cache=tmp_path / "cache")
    for thr, clusters in ((0.998, 1), (0.997, 1), (0.998, 3)):
        cfg = SemanticDedup.Config(
            enabled=True, model=str(models["enc"]), threshold=thr, clusters=clusters, batch_size=4
        )
        drops = SemanticDedup(cfg).resolve(keys, tmp_path / f"w{thr}{clusters}", run)
        got: dict[str, set[str]] = {}
        for d, k in zip(drops.column("id").to_pylist(), drops.column("dup_of").to_pylist(), strict=True):
            got.setdefault(k, {k}).add(d)
        planted = {frozenset({ids[i], ids[30 + i // 2]}) for i in range(0, 20, 2)}
        groups = {frozenset(g) for g in got.values()}
        assert all(any(p <= g for g in groups) for p in planted), (thr, clusters)
        for g in groups:  # the kept document is the best-scored of its group
            assert max(g, key=lambda x: (scores[ids.index(x)], [-ord(ch) for ch in x])) in got
        if clusters == 1:
            want = {frozenset(ids[i] for i in g) for g in _brute_groups(emb, thr)}
            assert groups == want, thr
        if thr == 0.998 and clusters == 1:  # later resolves must not run the encoder again
            monkeypatch.setattr(hf_models, "Loaded", None)
            hf_models._LOADED.clear()
    assert len(list((tmp_path / "cache" / "embeddings").glob("*.npy"))) == 2


def test_bad_models_are_one_line(models: dict[str, Path], tmp_path: Path, data_dir: Path) -> None:
    from llmpipe.curate.settings import CurateConfig
    from llmpipe.errors import ConfigError

    def err(section: str, body: dict) -> str:  # type: ignore[type-arg]
        with pytest.raises(ConfigError) as e:
            CurateConfig.from_mapping({section: body}).build_stages()
        assert "\n" not in str(e.value)
        return str(e.value)

    assert "is not a directory" in err("classifier", {"model": str(tmp_path / "nope"), "label": "high"})
    assert "not a sequence classification model" in err(
        "classifier", {"model": str(models["headless"]), "label": "high"}
    )
    assert "tokenizer does not match" in err(
        "classifier", {"model": str(models["mismatch"]), "label": "high"}
    )
    assert "tokenizer does not match" in err(
        "semantic_dedup", {"enabled": True, "model": str(models["mismatch"])}
    )
    assert "not a label" in err("classifier", {"model": str(models["clf"]), "label": "medium"})
    assert "one-output head" in err("classifier", {"model": str(models["clf"]), "score": "regression"})
    # a score named as a column the pipeline uses would replace it (the text, the language ...)
    for name in ("text", "id", "lang", "lang_score", "words", "source", "meta"):
        assert f"name {name!r} is a column the pipeline uses" in err(
            "classifier", {"model": str(models["clf"]), "label": "high", "name": name}
        )
    # values that would disable or skew the calibration, or that Ray cannot give an actor
    clf = {"model": str(models["clf"]), "label": "high"}
    for key, value, want in (
        ("sample_docs", 0, "sample_docs must be >= 1"),
        ("sample_docs", -4, "sample_docs must be >= 1"),
        ("threshold", float("nan"), "threshold is NaN"),
        ("num_cpus", -1, "num_cpus must be >= 0"),
        ("num_gpus", -0.5, "num_gpus must be >= 0"),
        ("actors", -2, "actors must be >= 0"),
    ):
        assert want in err("classifier", {**clf, "target_retention": 0.5, key: value}), key
        if key not in ("sample_docs", "threshold"):
            assert want in err("semantic_dedup", {"enabled": True, "model": str(models["enc"]), key: value})
    with pytest.raises(ConfigError, match="two models have the same name"):
        CurateConfig.from_mapping(
            {"classifier": [{"model": str(models["clf"]), "label": "high", "name": "q"}] * 2}
        )
    with pytest.raises(ConfigError, match=r"classifier\[1\]: unknown key"):
        CurateConfig.from_mapping({"classifier": [{"model": "x", "label": "a"}, {"modle": "y"}]})
    # through the command: one line, exit code 2
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"classifier:\n  model: {models['headless']}\n  label: high\n")
    p = run_cli(
        "curate",
        str(data_dir / "web" / INPUTS[1]),
        "--out",
        str(tmp_path / "o"),
        "--config",
        str(cfg),
        check=False,
    )
    lines = [x for x in p.stderr.splitlines() if x.strip() and not x.startswith("W1")]
    assert p.returncode == 2 and len(lines) == 1 and "not a sequence classification model" in lines[0], (
        p.stderr
    )


def _with_own_code(src: Path, dest: Path, marker: Path, where: str) -> Path:
    """A copy of the model directory ``src`` whose ``where`` (config.json or tokenizer_config.json) names
    code of its own (``auto_map``) in evil.py, which creates ``marker`` when it is imported."""
    import shutil

    shutil.copytree(src, dest)
    (dest / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import BertConfig, BertModel, BertTokenizer\n"
        "class EvilConfig(BertConfig):\n    model_type = 'evil'\n"
        "class EvilModel(BertModel):\n    config_class = EvilConfig\n"
        "class EvilTokenizer(BertTokenizer):\n    pass\n"
    )
    cfg = json.loads((dest / where).read_text())
    if where == "config.json":
        cfg["model_type"] = "evil"  # a type transformers does not know: only the directory's code has it
        cfg["auto_map"] = {
            k: f"evil.{v}"
            for k, v in (
                ("AutoConfig", "EvilConfig"),
                ("AutoModel", "EvilModel"),
                ("AutoModelForSequenceClassification", "EvilModel"),
                ("AutoModelForCausalLM", "EvilModel"),
            )
        }
    else:
        cfg["tokenizer_class"] = "EvilTokenizer"
        cfg["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    (dest / where).write_text(json.dumps(cfg))
    return dest


def test_model_code_never_runs(
    models: dict[str, Path], data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model directory whose config or tokenizer config names its own code (auto_map) is refused in
    one line: the code never runs, even when the user answers "y" to a question, and none is asked."""
    import io
    import subprocess
    import sys

    from llmpipe.errors import ConfigError

    def evil(j: int, model: str, where: str) -> tuple[Path, Path]:
        marker = tmp_path / f"ran{j}"
        return marker, _with_own_code(models[model], tmp_path / f"m{j}", marker, where)

    # in this process, "y" on stdin: the stages' checks at config time
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 10))
    for j, (model, where, section, body) in enumerate(
        (
            ("clf", "tokenizer_config.json", "classifier", {"label": "high"}),
            ("enc", "config.json", "semantic_dedup", {"enabled": True}),
            ("enc", "tokenizer_config.json", "semantic_dedup", {"enabled": True}),
        )
    ):
        marker, d = evil(j, model, where)
        with pytest.raises(ConfigError, match=r"asks to run its own code \(auto_map\); llmpipe never") as e:
            CurateConfig.from_mapping({section: {**body, "model": str(d)}}).build_stages()
        assert "\n" not in str(e.value) and str(d) in str(e.value)
        assert not marker.exists(), (model, where)

    # through the commands, "y" on stdin: curate with a classifier, and eval of a HF directory
    exe = str(Path(sys.executable).with_name("llmpipe"))
    doc = tmp_path / "doc.txt"
    doc.write_text("To be, or not to be, that is the question.\n")
    m1, d1 = evil(10, "clf", "config.json")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"classifier:\n  label: high\n  model: {d1}\n")
    m2, d2 = evil(11, "clf", "config.json")
    for marker, args in (
        (
            m1,
            ["curate", str(data_dir / "web" / INPUTS[1]), "--out", str(tmp_path / "o"), "--config", str(cfg)],
        ),
        (m2, ["eval", str(d2), "--text", str(doc), "--device", "cpu"]),
    ):
        p = subprocess.run([exe, *args], input="y\n", capture_output=True, text=True, timeout=300)
        lines = [x for x in p.stderr.splitlines() if x.strip() and not x.startswith("W1")]
        assert not marker.exists(), args
        assert "custom code" not in p.stdout + p.stderr, (args, p.stdout, p.stderr)
        assert p.returncode == 2 and len(lines) == 1, (args, p.stderr)
        assert lines[0].startswith("llmpipe: error: ") and "asks to run its own code (auto_map)" in lines[0]


def _byte_bpe(data_dir: Path):  # type: ignore[no-untyped-def]
    """A byte-level BPE (GPT-2/RoBERTa style, no normalizer) trained on crawl text, as a fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<s>", "</s>", "<pad>"])
    tok.train_from_iterator(crawl_texts(data_dir, 200), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 1), ("<s>", 0))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def test_long_texts_give_the_tokens_of_the_whole_text(
    models: dict[str, Path], data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ids of a long text are those the tokenizer gives the whole text, truncated, though only a
    bounded prefix of it is tokenized: texts of ordinary words, of words longer than a WordPiece word
    may be, with no whitespace at all, of multi-byte characters without spaces, with combining accents;
    on WordPiece (fast and slow) and byte-level BPE tokenizers."""
    from types import SimpleNamespace

    from llmpipe.curate.stages import hf_models
    from transformers import AutoTokenizer, BertTokenizer

    crawl = " ".join(crawl_texts(data_dir, 20))
    rng = random.Random(1)
    long_words = " ".join("".join(rng.choice("abcdefgh") for _ in range(150)) for _ in range(200))
    texts = [
        crawl,
        long_words,  # one [UNK] per 151 characters: the first cuts give too few tokens
        "abc" * 20_000,  # one word: one token, whatever the cut; only the whole text is exact
        "ab,c" * 10_000,  # no whitespace, but punctuation splits it
        "日本語のテキストと中文文本😀" * 3_000,  # multi-byte characters, no whitespace
        "cafe\u0301 " * 8_000,  # a combining accent after each word
        "x" * 9_000 + " " + crawl[:20_000],  # the first whitespace far beyond the cut
        "short text",
    ]
    tokenizers = {
        "wordpiece": AutoTokenizer.from_pretrained(models["clf"]),
        "wordpiece slow": BertTokenizer(str(models["clf"] / "vocab.txt"), model_max_length=64),
        "byte-level bpe": _byte_bpe(data_dir),
    }
    for name, tok in tokenizers.items():
        for max_length in (8, 64):
            longest: list[int] = []
            call = tok.__call__

            def spy(pieces: list[str], call=call, longest=longest, **kw):  # type: ignore[no-untyped-def]
                longest.append(max(map(len, pieces)))
                return call(pieces, **kw)

            checked = SimpleNamespace(tokenizer=_Spy(spy), max_length=max_length)
            got = hf_models.Checked.encode(checked, texts)  # type: ignore[arg-type]
            want = tok(texts, truncation=True, max_length=max_length)["input_ids"]
            assert got == [list(x) for x in want], (name, max_length)
            assert any(len(w) == max_length for w in want) and any(len(w) < max_length for w in want)
            # the ordinary long text was tokenized from a prefix: the first call's pieces are bounded
            assert longest[0] <= 2 * max_length * hf_models.CHARS_PER_TOKEN < len(crawl), (name, longest)


class _Spy:
    """A tokenizer whose calls go through ``call`` (to see the texts it is given)."""

    def __init__(self, call) -> None:  # type: ignore[no-untyped-def]
        self._call = call

    def __call__(self, pieces: list[str], **kw):  # type: ignore[no-untyped-def]
        return self._call(pieces, **kw)


def test_a_huge_document_keeps_memory_bounded(
    models: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    """A part with one 10.5 MB document is scored in a process whose peak memory grows by little over
    what loading the model took (the whole text tokenized before truncation grew it by 2.4 GB)."""
    import subprocess
    import sys

    texts = crawl_texts(data_dir, 30)
    big = " ".join(texts)
    big = " ".join([big] * (10_500_000 // len(big) + 1))
    keys = tmp_path / "k.keys.parquet"
    pq.write_table(
        pa.table({"id": [str(i) for i in range(31)], "text": [*texts[:15], big, *texts[15:]]}), keys
    )
    child = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from llmpipe.curate.stages import hf_models\n"
        "spec = hf_models.ModelSpec(sys.argv[1], 'classifier', None, 8)\n"
        "hf_models.loaded(spec)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "out = hf_models.run_model_file(spec, Path(sys.argv[2]), Path(sys.argv[3]))\n"
        "print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, out)\n"
    )
    args = [sys.executable, "-c", child, str(models["clf"]), str(keys), str(tmp_path / "cache")]
    p = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300)
    before, peak, out = p.stdout.split()
    grew_mb = (int(peak) - int(before)) / 1024  # ru_maxrss: KiB on Linux
    assert grew_mb < 500, grew_mb
    assert np.load(out).shape == (31, 2)


def _broken(src: Path, dest: Path, change) -> Path:  # type: ignore[no-untyped-def]
    import shutil

    shutil.copytree(src, dest)
    change(dest)
    return dest


def _edit_json(name: str, **changes) -> Any:  # type: ignore[no-untyped-def]
    def change(d: Path) -> None:
        cfg = json.loads((d / name).read_text())
        (d / name).write_text(json.dumps({**cfg, **changes}))

    return change


def _edit_weights(edit) -> Any:  # type: ignore[no-untyped-def]
    def change(d: Path) -> None:
        from safetensors.torch import load_file, save_file

        save_file(edit(load_file(d / "model.safetensors")), d / "model.safetensors")

    return change


def _nan_weights(weights: dict) -> dict:  # type: ignore[type-arg]
    """Every weight NaN: the model's outputs are all NaN."""
    return {k: v.float().fill_(float("nan")) if v.is_floating_point() else v for k, v in weights.items()}


def test_broken_model_files_are_one_line(models: dict[str, Path], tmp_path: Path, data_dir: Path) -> None:
    """Model directories damaged or made by someone else: one ConfigError line naming the directory and
    what is wrong, when the config is read (the headers of the weights checked against the config,
    nothing loaded), or where only loading shows it, when the model loads."""
    from llmpipe.curate.stage import RunContext
    from llmpipe.curate.stages import hf_models
    from llmpipe.curate.stages.semantic_dedup import SemanticDedup
    from llmpipe.errors import ConfigError

    half = lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:5000])  # noqa: E731
    cases: list[tuple[str, str, Any, dict, str]] = [  # type: ignore[type-arg]
        ("clf", "random", lambda d: (d / "model.safetensors").write_bytes(random.Random(0).randbytes(100_000)),
         {}, "model.safetensors is not a safetensors file (Error while deserializing header: header too large)"),
        ("clf", "half", half, {}, "model.safetensors is not a safetensors file (Error while deserializing header: "
         "incomplete metadata"),
        ("clf", "tokenizer", lambda d: (d / "tokenizer.json").write_text("garbage{"), {},
         "no tokenizer that transformers can load (expected value at line 1 column 1)"),
        ("clf", "labels3", _edit_json("config.json", id2label={"0": "low", "1": "mid", "2": "high"},
         label2id={"low": 0, "mid": 1, "high": 2}), {},
         "the weights do not fit config.json: classifier.bias is [2] in model.safetensors, the config makes it [3]"),
        ("clf", "hidden", _edit_json("config.json", hidden_size=64), {}, "the weights do not fit config.json"),
        ("enc", "hidden", _edit_json("config.json", hidden_size=64), {}, "the weights do not fit config.json"),
        ("clf", "list", lambda d: (d / "config.json").write_text("[1,2]"), {},
         "not a model directory transformers can read"),
        ("clf", "nohead", _edit_weights(lambda w: {k: v for k, v in w.items() if not k.startswith("classifier")}),
         {}, "the weights have no classification head (classifier.bias, classifier.weight)"),
        ("enc", "other", _edit_weights(lambda w: {f"x{k}": v for k, v in w.items()}), {},
         "the safetensors weights hold none of the model's tensors"),
        ("enc", "pickle", lambda d: (d / "model.safetensors").rename(d / "pytorch_model.bin"), {},
         "no model.safetensors (only safetensors weights are read, never a pickle)"),
        ("enc", "index", lambda d: (d / "model.safetensors").unlink()
         or (d / "model.safetensors.index.json").write_text('{"weight_map": {"a": "../enc/model.safetensors"}}'),
         {}, "model.safetensors.index.json names shards that are not files of the directory"),
        ("enc", "index-binary", lambda d: (d / "model.safetensors").rename(d / "model.safetensors.index.json"),
         {}, "model.safetensors.index.json is not a safetensors index"),
        ("enc", "max_length", lambda d: None, {"max_length": 1}, "max_length must be >= 2"),
        ("clf", "model_max_length", _edit_json("tokenizer_config.json", model_max_length=2), {},
         "max_length 2 leaves no token of text after the tokenizer's 2 special tokens"),
    ]  # fmt: skip
    for j, (base, what, change, extra, want) in enumerate(cases):
        d = _broken(models[base], tmp_path / f"{base}-{what}-{j}", change)
        section = (
            {"classifier": {"model": str(d), "label": "high", **extra}}
            if base == "clf"
            else {"semantic_dedup": {"enabled": True, "model": str(d), **extra}}
        )
        with pytest.raises(ConfigError) as e:
            CurateConfig.from_mapping(section).build_stages()
        assert want in str(e.value) and "\n" not in str(e.value), (what, str(e.value))
        assert str(d) in str(e.value) or what == "max_length", (what, str(e.value))

    # only loading shows it: a legacy LayerNorm name (gamma, which transformers renames) of the wrong shape
    legacy = _broken(
        models["clf"],
        tmp_path / "legacy",
        _edit_weights(
            lambda w: {
                (k.replace(".weight", ".gamma") if k == "bert.embeddings.LayerNorm.weight" else k): (
                    v[:16] if k == "bert.embeddings.LayerNorm.weight" else v
                )
                for k, v in w.items()
            }
        ),
    )
    with pytest.raises(
        ConfigError, match=r"cannot load the model's safetensors weights \(size mismatch for weight"
    ):
        hf_models.Loaded(hf_models.ModelSpec(str(legacy), "classifier"))

    # an encoder whose embeddings are all NaN: one line, not scikit-learn's traceback from k-means
    nan = _broken(models["enc"], tmp_path / "nan", _edit_weights(_nan_weights))
    cfg = SemanticDedup.Config(enabled=True, model=str(nan), clusters=2)
    stage = SemanticDedup(cfg)
    texts = crawl_texts(data_dir, 8)
    batch = pa.record_batch([pa.array([f"d{i}" for i in range(8)]), pa.array(texts)], names=["id", "text"])
    keys = tmp_path / "nan.keys.parquet"
    pq.write_table(stage.prepare(batch), keys)
    with pytest.raises(ConfigError, match=f"{nan}: the encoder gives no finite embedding"):
        stage.resolve([keys], tmp_path / "w", RunContext(0, cache=tmp_path / "cache"))


def _nan_for_a_token(texts: list[str], tok_dir: Path, key: str) -> tuple[Any, set[int]]:
    """A weights edit that makes the embedding of one token NaN (a token in about half of the texts'
    first 64 tokens), and the indices of the texts that hold it: the model's output is NaN for those."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    ids = [set(x[1:-1]) for x in tok(texts, truncation=True, max_length=64)["input_ids"]]
    counts: dict[int, int] = {}
    for s in ids:
        for t in s:
            counts[t] = counts.get(t, 0) + 1
    token = min(counts, key=lambda t: (abs(counts[t] - len(texts) / 2), t))
    holders = {i for i, s in enumerate(ids) if token in s}
    assert 0 < len(holders) < len(texts)

    def edit(w: dict) -> dict:  # type: ignore[type-arg]
        w[key] = w[key].clone()
        w[key][token] = float("nan")
        return w

    return _edit_weights(edit), holders


def test_non_finite_scores_and_embeddings_are_dropped_apart(
    models: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    """A document the model scores NaN is dropped as non_finite_<name> (NaN passed every threshold), the
    threshold is calibrated on the finite scores, the histogram counts only finite scores (NaN cast to a
    bin was -461168601842738816) and the NaN ones apart; every NaN weight: every document so dropped.
    A document whose embedding is NaN is dropped as non_finite_embedding; the others are deduplicated."""
    from llmpipe.curate.stage import RunContext, StageCounts
    from llmpipe.curate.stages.classifier import Classifier
    from llmpipe.curate.stages.semantic_dedup import SemanticDedup

    texts = [" ".join(t.split()[:80]) for t in crawl_texts(data_dir, 40)]
    ids = [f"d{i:03d}" for i in range(len(texts))]
    batch = pa.record_batch([pa.array(ids), pa.array(texts)], names=["id", "text"])
    change, holders = _nan_for_a_token(texts, models["clf"], "bert.embeddings.word_embeddings.weight")
    some = _broken(models["clf"], tmp_path / "some-nan", change)
    every = _broken(models["clf"], tmp_path / "all-nan", _edit_weights(_nan_weights))
    for model, nan in ((some, holders), (every, set(range(len(texts))))):
        for extra in ({"threshold": 0.5}, {"target_retention": 0.5, "target_of": "stage"}):
            cfg = CurateConfig.from_mapping(
                {"classifier": {"model": str(model), "label": "high", "name": "q", **extra}}
            )
            stage = next(s for s in cfg.build_stages() if isinstance(s, Classifier))
            work = tmp_path / f"w-{model.name}-{len(extra)}"
            key = work / "keys" / "000000.keys.parquet"
            key.parent.mkdir(parents=True)
            pq.write_table(stage.prepare(batch), key)
            drops = stage.resolve([key], work, RunContext(0, cache=tmp_path / "cache"))
            reasons = dict(
                zip(drops.column("id").to_pylist(), drops.column("reason").to_pylist(), strict=True)
            )
            assert {i for i, r in reasons.items() if r == "non_finite_q"} == {ids[i] for i in nan}, model.name
            thr = json.loads((work / "thresholds.json").read_text())["q"]
            scores = pq.read_table(work / "keys" / "000000.q.scores.parquet").column("score").to_numpy()
            assert np.isnan(scores).sum() == len(nan)
            low = {ids[i] for i, s in enumerate(scores) if s < thr}
            assert {i for i, r in reasons.items() if r == "low_q"} == low
            if len(nan) < len(texts):
                assert np.isfinite(thr) and low and len(low) + len(nan) < len(texts)
            counts = StageCounts("classifier")
            stage.annotate(batch, key, counts)
            hist = {k: v for k, v in counts.counters.items() if k.startswith("q [")}
            assert all(v > 0 for v in hist.values()) and sum(hist.values()) == len(texts) - len(nan), hist
            assert counts.counters["q non-finite"] == len(nan)

    # semantic dedup: NaN for the documents that hold the token; planted copies of the others are found
    change, holders = _nan_for_a_token(texts, models["enc"], "embeddings.word_embeddings.weight")
    enc = _broken(models["enc"], tmp_path / "enc-some-nan", change)
    clean = [i for i in range(len(texts)) if i not in holders][:5]
    more = pa.record_batch(
        [pa.array([f"e{i:03d}" for i in clean]), pa.array([texts[i] for i in clean])], names=["id", "text"]
    )
    stage = SemanticDedup(SemanticDedup.Config(enabled=True, model=str(enc), threshold=0.999, clusters=3))
    keys = [tmp_path / f"{j}.sd.keys.parquet" for j in range(2)]
    for k, b in zip(keys, (batch, more), strict=True):
        pq.write_table(stage.prepare(b), k)
    drops = stage.resolve(keys, tmp_path / "sd", RunContext(0, cache=tmp_path / "cache"))
    got = list(zip(*(drops.column(c).to_pylist() for c in ("id", "reason", "dup_of")), strict=True))
    assert {d for d, r, _ in got if r == "non_finite_embedding"} == {ids[i] for i in holders}
    dup = {d: k for d, r, k in got if r == "semantic_duplicate"}
    assert not {ids[i] for i in holders} & (set(dup) | set(dup.values()))
    for i in clean:  # the planted copy or its original dropped as a duplicate of the other (or of a third)
        assert f"e{i:03d}" in dup or dup.get(ids[i]) == f"e{i:03d}", i


def test_more_clusters_than_distinct_documents_is_quiet(
    models: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    """Fewer distinct embeddings than clusters (copies of 5 documents, 10 clusters): k-means runs with
    as many clusters as distinct points, without scikit-learn's ConvergenceWarning, and the copies go."""
    import warnings

    from llmpipe.curate.stage import RunContext
    from llmpipe.curate.stages.semantic_dedup import SemanticDedup

    texts = [" ".join(t.split()[:60]) for t in crawl_texts(data_dir, 5)] * 3
    ids = [f"d{i:03d}" for i in range(len(texts))]
    stage = SemanticDedup(
        SemanticDedup.Config(enabled=True, model=str(models["enc"]), threshold=0.999, clusters=10)
    )
    keys = tmp_path / "k.keys.parquet"
    pq.write_table(
        stage.prepare(pa.record_batch([pa.array(ids), pa.array(texts)], names=["id", "text"])), keys
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drops = stage.resolve([keys], tmp_path / "w", RunContext(0, cache=tmp_path / "cache"))
    assert set(drops.column("id").to_pylist()) == set(ids[5:])


def test_a_semantic_dedup_run_prints_no_leak_report(
    models: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    """Worker processes forked after transformers imported triton (through torch._dynamo): the objects
    the fork froze are unfrozen when the pool closes, so the exit prints no nanobind "leaked" report."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"semantic_dedup:\n  enabled: true\n  model: {models['enc']}\n  clusters: 4\n")
    p = run_cli(
        "curate", str(data_dir / "web" / INPUTS[1]), "--out", str(tmp_path / "o"), "--config", str(cfg),
        "--quiet", "--workers", "2",
    )  # fmt: skip
    assert "nanobind" not in p.stderr and "leaked" not in p.stderr, p.stderr
