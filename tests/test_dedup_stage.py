"""The near_dedup curate stage: disk phases, invariance to order/batching/partitions, end to end."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from dedup_corpus import Corpus, jaccard, planted_corpus, shingle_set
from llmpipe.curate.settings import CurateConfig
from llmpipe.curate.stage import DROPS_SCHEMA, RunContext
from llmpipe.curate.stages.near_dedup import NearDedup

NO_RUN = RunContext(input_words=0)  # dedup stages do not use the run totals


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> Corpus:
    return planted_corpus(data_dir, n_base=200, n_plain=100)


def _run(
    stage: NearDedup, rows: list[tuple[str, str]], batch: int, files: int, tmp: Path, run: RunContext = NO_RUN
) -> pa.Table:
    """prepare per batch into `files` key files (like inputs), then resolve."""
    tmp.mkdir(parents=True)
    per_file = -(-len(rows) // files)
    key_files = []
    for f in range(files):
        part = rows[f * per_file : (f + 1) * per_file]
        tables = []
        for i in range(0, len(part), batch):
            chunk = part[i : i + batch]
            rb = pa.record_batch(
                {
                    "id": [r[0] for r in chunk],
                    "text": [r[1] for r in chunk],
                    "source": ["x"] * len(chunk),
                    "position": list(range(len(chunk))),
                }
            )
            tables.append(stage.prepare(rb))
        path = tmp / f"{f:06d}.keys.parquet"
        pq.write_table(pa.concat_tables(tables), path)
        key_files.append(path)
    work = tmp / "global"
    work.mkdir()
    return stage.resolve(key_files, work, run)


def test_drops_are_verified_and_point_to_the_smallest_id(corpus: Corpus, tmp_path: Path) -> None:
    stage = NearDedup(NearDedup.Config())
    drops = _run(stage, list(zip(corpus.ids, corpus.texts, strict=True)), 64, 3, tmp_path / "a")
    assert drops.schema == DROPS_SCHEMA
    assert set(drops.column("reason").to_pylist()) == {"near_duplicate"}
    by_id = dict(zip(corpus.ids, corpus.texts, strict=True))
    pairs = list(zip(drops.column("id").to_pylist(), drops.column("dup_of").to_pylist(), strict=True))
    dropped = {d for d, _ in pairs}
    assert all(k < d and k not in dropped for d, k in pairs)
    assert min(jaccard(shingle_set(by_id[d]), shingle_set(by_id[k])) for d, k in pairs) >= 0.5
    sets = {i: shingle_set(t) for i, t in by_id.items()}
    high = [
        (corpus.ids[a], corpus.ids[b])
        for a, b, _ in corpus.planted
        if jaccard(sets[corpus.ids[a]], sets[corpus.ids[b]]) >= 0.85
    ]
    assert sum(v in dropped for _, v in high) >= 0.95 * len(high)


def test_same_drops_for_any_order_batching_and_partitioning(corpus: Corpus, tmp_path: Path) -> None:
    rows = list(zip(corpus.ids, corpus.texts, strict=True))
    base = _run(NearDedup(NearDedup.Config()), rows, 1000, 1, tmp_path / "one")
    assert base.num_rows > 50
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    other = _run(NearDedup(NearDedup.Config()), shuffled, 7, 4, tmp_path / "shuffled")
    assert other.equals(base)
    # tiny partitions: the band rows of the shuffle are spread over many partition files
    many = _run(NearDedup(NearDedup.Config(partition_mb=0.02)), shuffled[::-1], 33, 2, tmp_path / "parts")
    assert len(list((tmp_path / "parts" / "global" / "groups").iterdir())) >= 5
    assert many.equals(base)
    kept = sorted(set(corpus.ids) - set(base.column("id").to_pylist()))
    assert kept == sorted(set(corpus.ids) - set(other.column("id").to_pylist()))


def test_documents_dropped_before_are_left_out(corpus: Corpus, tmp_path: Path) -> None:
    """Keys prepared before an earlier global stage's drops applied (``RunContext.dropped``) resolve as
    if those documents had never been there: same drops as the key files without them."""
    rows = list(zip(corpus.ids, corpus.texts, strict=True))
    base = _run(NearDedup(NearDedup.Config()), rows, 64, 3, tmp_path / "all")
    keepers = sorted(set(base.column("dup_of").to_pylist()))
    # the kept document of every other cluster (its copies then regroup under the next smallest id)
    # and some documents of no cluster, in two drop lists
    gone = [keepers[::2], corpus.ids[::17]]
    lists = []
    for n, ids in enumerate(gone):
        lists.append(tmp_path / f"drops{n}.parquet")
        none = pa.nulls(len(ids), pa.string())
        pq.write_table(pa.table([ids, ["exact_duplicate"] * len(ids), none], schema=DROPS_SCHEMA), lists[-1])
    ctx = RunContext(input_words=0, dropped=tuple(lists))
    skipped = _run(NearDedup(NearDedup.Config()), rows, 64, 3, tmp_path / "skipped", ctx)
    absent = {i for ids in gone for i in ids}
    without = _run(
        NearDedup(NearDedup.Config()), [r for r in rows if r[0] not in absent], 64, 3, tmp_path / "without"
    )
    assert skipped.equals(without)
    assert not skipped.equals(base) and skipped.num_rows > 20
    assert absent.isdisjoint(skipped.column("id").to_pylist() + skipped.column("dup_of").to_pylist())


def test_exact_and_near_dedup_share_a_pass_with_the_same_outputs(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Near dedup's keys are prepared in the pass that prepares exact dedup's (no pass over the
    documents applies exact dedup's drops alone); the run's outputs are those of the separate passes."""
    from llmpipe.curate import pipeline
    from llmpipe.curate.stages.exact_dedup import ExactDedup
    from llmpipe.curate.stages.line_dedup import LineDedup
    from llmpipe.curate.steps import segments_of

    def shape(cfg: CurateConfig) -> list[tuple[list[str], list[str], list[str]]]:
        return [
            (
                [d.name for d in s.doc_stages],
                [st.name for _, st in s.ends_with],
                [st.name for _, st in s.after],
            )
            for s in segments_of(cfg.build_stages())
        ]

    default = CurateConfig.from_mapping({})
    assert [(e, a) for _, e, a in shape(default)] == [
        (["exact_dedup", "near_dedup"], []),
        ([], ["exact_dedup", "near_dedup"]),
    ]
    # a global stage that rewrites documents, or ignores no drops, starts a pass of its own
    lines = CurateConfig.from_mapping({"line_dedup": {"enabled": True}, "near_dedup": {"enabled": False}})
    assert [(e, a) for _, e, a in shape(lines)] == [
        (["exact_dedup"], []),
        (["line_dedup"], ["exact_dedup"]),
        ([], ["line_dedup"]),
    ]
    assert not LineDedup.ignores_dropped and not ExactDedup.ignores_dropped and NearDedup.ignores_dropped

    # near duplicates, and exact copies under new ids, some smaller than their original's
    inp = tmp_path / "in"
    inp.mkdir()
    with open(inp / "docs.jsonl", "w", encoding="utf-8") as f:
        for i, (d, t) in enumerate(zip(corpus.ids, corpus.texts, strict=True)):
            f.write(json.dumps({"id": d, "text": t}) + "\n")
            if i % 7 == 0:
                f.write(json.dumps({"id": ("0" if i % 2 else "~") + d, "text": t}) + "\n")
    cfg = CurateConfig.from_mapping(
        {"language": {"enabled": False}, "tokenizer": {"vocab_size": 400}, "pack": {"seq_len": 64}}
    )
    quiet = {"progress": False, "log": lambda m: None}
    shared = pipeline.run_curate([str(inp)], tmp_path / "shared", cfg, **quiet)
    monkeypatch.setattr(NearDedup, "ignores_dropped", False)
    assert len(segments_of(cfg.build_stages())) == 3
    apart = pipeline.run_curate([str(inp)], tmp_path / "apart", cfg, **quiet)
    stages = {s["name"]: s for s in shared["stages"]}
    assert stages["exact_dedup"]["dropped"]["exact_duplicate"] > 20
    assert stages["near_dedup"]["dropped"]["near_duplicate"] > 20
    assert shared == apart
    files = sorted(p.name for p in (tmp_path / "apart").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "shared").iterdir())
    for name in files:
        assert (tmp_path / "shared" / name).read_bytes() == (tmp_path / "apart" / name).read_bytes(), name


def test_config_is_typed_and_checked() -> None:
    cfg = CurateConfig.from_mapping({"near_dedup": {"threshold": 0.8, "ngram": 3}})
    stage = next(s for s in cfg.build_stages() if s.name == "near_dedup")
    assert (stage.bands, stage.rows) == (9, 12) and stage.verify_threshold == 0.8
    off = CurateConfig.from_mapping({"near_dedup": {"enabled": False}})
    assert all(s.name != "near_dedup" for s in off.build_stages())
    from llmpipe.errors import ConfigError

    with pytest.raises(ConfigError):
        CurateConfig.from_mapping({"near_dedup": {"bands": 20}}).build_stages()
    with pytest.raises(ConfigError):
        CurateConfig.from_mapping({"near_dedup": {"unit": "lines"}})
    with pytest.raises(ConfigError):
        CurateConfig.from_mapping({"near_dedup": {"bogus": 1}})


def test_curate_end_to_end_reports_near_dedup(data_dir: Path, corpus: Corpus, tmp_path: Path) -> None:
    src = data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz"
    with gzip.open(src, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "crawl.jsonl.gz").write_bytes(src.read_bytes())
    # near duplicates of real reviews in a second input: 40 bases and a light edit of each
    planted = [(a, b) for a, b, kind in corpus.planted[:40]]
    with open(inp / "planted.jsonl", "w", encoding="utf-8") as f:
        for a, b in planted:
            for i in (a, b):
                f.write(json.dumps({"id": corpus.ids[i], "text": corpus.texts[i]}) + "\n")
    cfg = tmp_path / "small.yaml"
    cfg.write_text("pack:\n  seq_len: 128\n  val_fraction: 0.0\ntokenizer:\n  vocab_size: 600\n")
    out = tmp_path / "out"
    run_cli("curate", str(inp), "--out", str(out), "--config", str(cfg))
    stats = json.loads((out / "stats.json").read_text())
    stages = {s["name"]: s for s in stats["stages"]} if isinstance(stats["stages"], list) else stats["stages"]
    nd = stages["near_dedup"]
    assert nd["docs_in"] == nd["docs_out"] + sum(nd["dropped"].values())
    sets = [shingle_set(corpus.texts[b]) for _, b in planted]
    expected_min = sum(
        jaccard(shingle_set(corpus.texts[a]), s) >= 0.85 for (a, _), s in zip(planted, sets, strict=True)
    )
    assert nd["dropped"].get("near_duplicate", 0) >= expected_min > 0
    assert nd["docs_in"] <= len(records) + 2 * len(planted)
