"""Benchmark decontamination: passages of two evaluation files (Alice in Wonderland paragraphs as JSONL,
Shakespeare speeches as Parquet) planted in real crawl documents are found and attributed to their set;
nothing else is removed (oracle: lm-eval's own normalisation and n-grams, Python set intersection);
identical shards for 1 and 2 workers. ``mode: spans`` cuts exactly the oracle's merged matching spans."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.stages.decontaminate import CutContaminated, Decontaminate
from llmpipe.errors import ConfigError

OFF = ("length", "language", "gopher_repetition", "gopher_quality", "c4", "fineweb", "exact_dedup")
OFF += ("near_dedup", "pii")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, object]:
    """Evaluation files and crawl documents with planted passages (one planted with other case and
    punctuation, one with only 12 words of a passage: below the n-gram, kept)."""
    d = tmp_path_factory.mktemp("decont")
    books = data_dir / "reference" / "books"
    alice = [p.replace("\n", " ") for p in books.joinpath("wonderland.txt").read_text().split("\n\n")]
    alice = [p for p in alice if len(p.split()) >= 30][:200]
    speeches = [
        s for s in books.joinpath("tiny-shakespeare.txt").read_text().split("\n\n") if len(s.split()) >= 30
    ]
    speeches = speeches[:300]
    (d / "alice.jsonl").write_text("".join(json.dumps({"question": p}) + "\n" for p in alice))
    pq.write_table(pa.table({"text": speeches}), d / "shakespeare.parquet")
    docs = [
        json.loads(x)
        for x in gzip.decompress(
            (data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes()
        ).splitlines()
    ]
    docs = [{"id": r["id"], "text": r["text"]} for r in docs[:300] if r["text"].strip()]
    rng = random.Random(7)
    planted: dict[str, str] = {}
    for k, i in enumerate(rng.sample(range(len(docs)), 9)):
        src, name = (alice, "alice") if k % 2 == 0 else (speeches, "shakespeare")
        words = rng.choice(src).split()
        start = rng.randrange(0, len(words) - 20)
        passage = " ".join(words[start : start + (12 if k == 8 else 20)])
        if k == 2:
            passage = passage.upper().replace(" ", " -- ", 3) + "!!"
        text = docs[i]["text"]
        cut = len(text) // 2
        docs[i]["text"] = text[:cut] + "\n" + passage + "\n" + text[cut:]
        if k != 8:
            planted[docs[i]["id"]] = name
    (d / "in").mkdir()
    (d / "in" / "crawl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in docs))
    cfg = {
        "alice": {"path": str(d / "alice.jsonl"), "field": "question"},
        "shakespeare": str(d / "shakespeare.parquet"),
    }
    return {
        "dir": d,
        "docs": docs,
        "planted": planted,
        "sets": cfg,
        "texts": {"alice": alice, "shakespeare": speeches},
    }


def oracle(docs: list[dict[str, str]], sets: dict[str, list[str]], n: int) -> dict[str, str]:
    """lm-eval's normalisation and word n-grams, Python sets: the first set (config order) a document
    shares an n-gram with."""
    from lm_eval.decontamination.janitor import Janitor, word_ngrams

    j = Janitor(ngram_n=n)
    grams = {
        name: {g for t in texts for g in word_ngrams(j.normalize_string(t), n)}
        for name, texts in sets.items()
    }
    out = {}
    for doc in docs:
        mine = set(word_ngrams(j.normalize_string(doc["text"]), n))
        hit = [name for name, g in grams.items() if mine & g]
        if hit:
            out[doc["id"]] = hit[0]
    return out


def test_planted_passages_are_removed_and_attributed(corpus: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    docs, planted = corpus["docs"], corpus["planted"]
    want = oracle(docs, corpus["texts"], 13)
    assert want == planted  # the oracle finds exactly the planted documents (the 12-word one is not)
    stage = Decontaminate(Decontaminate.Config(enabled=True, eval_sets=corpus["sets"]))
    batch = pa.RecordBatch.from_pydict({"id": [r["id"] for r in docs], "text": [r["text"] for r in docs]})
    counts = StageCounts(stage.name)
    kept = stage.run(batch, counts)
    got = {
        i: r.removeprefix("contaminated_")
        for i, r in zip(batch.column("id").to_pylist(), stage.reasons(batch), strict=True)
        if r
    }
    assert got == want
    assert kept.num_rows == len(docs) - len(want)
    assert dict(counts.dropped) == {"contaminated_alice": 4, "contaminated_shakespeare": 4}
    # other n-gram sizes agree with the oracle too (8-grams match more of the crawl by chance)
    small = Decontaminate(Decontaminate.Config(enabled=True, eval_sets=corpus["sets"], ngram=8))
    got8 = {i for i, r in zip(batch.column("id").to_pylist(), small.reasons(batch), strict=True) if r}
    assert got8 == set(oracle(docs, corpus["texts"], 8))

    # curate end to end, every other filter off: the funnel attributes the removals, 1 and 2 workers agree
    d = corpus["dir"]
    sets_yaml = json.dumps(corpus["sets"])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "".join(f"{name}:\n  enabled: false\n" for name in OFF)
        + f"decontaminate:\n  enabled: true\n  eval_sets: {sets_yaml}\n"
        + "pack:\n  seq_len: 64\n  samples_per_shard: 500\n  val_fraction: 0.0\ntokenizer:\n  vocab_size: 300\n"
    )
    trees = []
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}"
        run_cli(
            "curate",
            str(d / "in"),
            "--out",
            str(out),
            "--config",
            str(cfg),
            "--workers",
            workers,
            "--chunk-mb",
            "0.3",
        )
        trees.append(
            {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.glob("*.arrow"))}
        )
    assert trees[0] == trees[1] and trees[0]
    stats = json.loads((tmp_path / "out1" / "stats.json").read_text())
    st = next(s for s in stats["stages"] if s["name"] == "decontaminate")
    assert st["docs_in"] == len(docs)
    assert st["dropped"] == {"contaminated_alice": 4, "contaminated_shakespeare": 4}

    # a bad evaluation file is one clear line
    with pytest.raises(ConfigError, match="does not exist"):
        Decontaminate(Decontaminate.Config(enabled=True, eval_sets={"x": str(tmp_path / "none.jsonl")}))
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: not JSON"):
        _ = Decontaminate(
            Decontaminate.Config(enabled=True, eval_sets={"x": str(tmp_path / "bad.jsonl")})
        ).table


def test_an_eval_set_that_matches_nothing_is_one_line(corpus: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """An evaluation file whose records are not objects, none of whose records holds the field, or
    that yields no n-gram, stops the run with one line naming the set, the file and the field (never
    a run that removes nothing); a .json file of one array of objects is read as its objects."""
    alice = corpus["texts"]["alice"]
    docs = corpus["docs"]
    batch = pa.RecordBatch.from_pydict({"id": [r["id"] for r in docs], "text": [r["text"] for r in docs]})
    array = tmp_path / "ev.json"  # one array of objects: the same set as alice.jsonl
    array.write_text(json.dumps([{"question": p} for p in alice], indent=1))
    want = Decontaminate(Decontaminate.Config(enabled=True, eval_sets={"alice": corpus["sets"]["alice"]}))
    got = Decontaminate(Decontaminate.Config(enabled=True, field="question", eval_sets={"m": str(array)}))
    hits = [r is not None for r in got.reasons(batch)]
    assert hits == [r is not None for r in want.reasons(batch)] and sum(hits) == 4

    bad = {
        # JSONL of other keys: nothing would match
        "query.jsonl": (
            "".join(json.dumps({"query": p}) + "\n" for p in alice[:5]),
            r"eval_sets\.m: .*query\.jsonl: no record has the field 'question' \(the first record's keys: \['query'\]\)",
        ),
        "strings.jsonl": (
            "".join(json.dumps(p) + "\n" for p in alice[:5]),
            r"strings\.jsonl:1: a JSON string, not an object: JSONL is expected, one object per line",
        ),
        "mixed.jsonl": (
            json.dumps({"question": alice[0]}) + "\n\n" + json.dumps([alice[1]]) + "\n",
            r"mixed\.jsonl:3: a JSON array, not an object",
        ),
        "numbers.json": ("[1, 2]", r"numbers\.json: item 0 of its array: a JSON number, not an object"),
        "short.jsonl": (
            json.dumps({"question": "too few words"}) + "\n",
            r"short\.jsonl: no text of 13 words or more in field 'question' \(1 text\(s\)\)",
        ),
        "empty.json": ("\n", r"empty\.json: holds no record"),
    }
    for name, (text, message) in bad.items():
        (tmp_path / name).write_text(text)
        spec = {"m": {"path": str(tmp_path / name), "field": "question"}}
        with pytest.raises(ConfigError, match=message):
            Decontaminate(Decontaminate.Config(enabled=True, eval_sets=spec))
    pq.write_table(pa.table({"question": [None, "a few words"]}), tmp_path / "nulls.parquet")
    with pytest.raises(ConfigError, match=r"nulls\.parquet: no text of 13 words or more in field 'question'"):
        Decontaminate(
            Decontaminate.Config(
                enabled=True, field="question", eval_sets={"m": str(tmp_path / "nulls.parquet")}
            )
        )
    # curate: one line, before any stage runs (no shard, no stats)
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": alice[0]}) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"decontaminate: {{enabled: true, field: question, eval_sets: {{m: {tmp_path / 'query.jsonl'}}}}}\n"
    )
    p = run_cli(
        "curate", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "o"), "--config", str(cfg), check=False
    )
    assert p.returncode == 2 and p.stderr.strip().startswith("llmpipe: error: decontaminate.eval_sets.m:"), (
        p.stderr
    )
    assert "no record has the field 'question'" in p.stderr and "\n" not in p.stderr.strip()
    assert "curate: 1 input(s)" not in p.stdout + p.stderr


def oracle_cut(text: str, grams: dict[str, set[str]], n: int) -> tuple[str | None, str]:
    """lm-eval's normalisation per whitespace token (a token of punctuation alone is no word), Python
    sets: the set of the first matching n-gram, and the text without the merged matching windows
    (each from its first word's first character to its last word's last; nothing when they hold
    every word)."""
    from lm_eval.decontamination.janitor import Janitor, word_ngrams

    j = Janitor(ngram_n=n)
    toks = [(j.normalize_string(m.group()), m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    words = [(w, s, e) for w, s, e in toks if w]
    assert [w for w, _, _ in words] == j.normalize_string(text).split()  # the oracle's words are lm-eval's
    first, spans = None, []  # spans: [first word, end word)
    for i, g in enumerate(word_ngrams(j.normalize_string(text), n)):
        hit = [name for name, gs in grams.items() if g in gs]
        if not hit:
            continue
        first = first or hit[0]
        if spans and i <= spans[-1][1]:
            spans[-1][1] = i + n
        else:
            spans.append([i, i + n])
    if sum(b - a for a, b in spans) == len(words) and spans:
        return first, ""
    out, at = "", 0
    for a, b in spans:
        out, at = out + text[at : words[a][1]], words[b - 1][2]
    return first, out + text[at:]


def test_spans_mode_cuts_the_oracle_spans(corpus: dict) -> None:  # type: ignore[type-arg]
    """``mode: spans``: each planted passage is cut out (the oracle's spans, byte for byte), every
    other document is unchanged, a document that was only a passage is dropped as empty, and the
    counters attribute each document to its set. (Curate runs with spans on, 1 and 2 workers, Ray
    and kills: tests/test_corpus_dedup_runs.py, tests/test_ray.py.)"""
    docs = list(corpus["docs"])
    alice = corpus["texts"]["alice"]
    docs.append({"id": "only-eval", "text": " ".join(alice[3].split()[:40]) + " ..."})
    n = 13
    from lm_eval.decontamination.janitor import Janitor, word_ngrams

    j = Janitor(ngram_n=n)
    grams = {
        k: {g for t in v for g in word_ngrams(j.normalize_string(t), n)} for k, v in corpus["texts"].items()
    }
    want_text, want_first = {}, {}
    for d in docs:
        first, want_text[d["id"]] = oracle_cut(d["text"], grams, n)
        if first:
            want_first[d["id"]] = first
    assert set(want_first) == {*corpus["planted"], "only-eval"} and want_text["only-eval"] == ""

    stage = Decontaminate.from_config(
        Decontaminate.Config(enabled=True, eval_sets=corpus["sets"], mode="spans")
    )
    assert isinstance(stage, CutContaminated) and stage.name == "decontaminate"
    batch = pa.RecordBatch.from_pydict({"id": [r["id"] for r in docs], "text": [r["text"] for r in docs]})
    counts = StageCounts(stage.name)
    kept = stage.run(batch, counts)
    got = dict(zip(kept.column("id").to_pylist(), kept.column("text").to_pylist(), strict=True))
    assert got == {i: t for i, t in want_text.items() if t}
    for d in docs:  # nothing but the planted passages moved
        assert (got.get(d["id"]) == d["text"]) == (d["id"] not in want_first)
    assert dict(counts.dropped) == {"empty_after_decontaminate": 1}
    assert counts.modified == len(want_first)
    removed = sum(len(d["text"].encode()) - len(want_text[d["id"]].encode()) for d in docs)
    assert counts.counters["bytes_removed"] == removed
    assert counts.counters["contaminated_alice"] == 5 and counts.counters["contaminated_shakespeare"] == 4
    assert counts.counters["spans_removed"] == 9
    counts.check()
    with pytest.raises(ConfigError, match="mode must be"):
        from llmpipe.curate.settings import CurateConfig

        CurateConfig.from_mapping({"decontaminate": {"mode": "span"}})
