"""``url_filter``, ``line_dedup``, ``substring_dedup`` and ``decontaminate`` (cutting spans) in real
curate runs: a run with ``--workers 2`` in 0.1 MB chunks and a ``--workers 1`` run of whole files
killed (SIGKILL) in the URL filter's step, in the line count, in the substring plan's sorted runs,
in the suffix-array pairs and in the decontamination step, then re-run, give the same bytes; their
stages are in stats.json with what they removed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

CONFIG = (
    "pack:\n  seq_len: 64\n  samples_per_shard: 2000\n  val_fraction: 0.05\n"
    "tokenizer:\n  vocab_size: 300\n  sample_bytes: 200000\n"
    "near_dedup:\n  enabled: false\nlanguage:\n  enabled: false\ngopher_quality:\n  enabled: false\n"
    "line_dedup:\n  enabled: true\n  unit: line\n  max_occurrences: 1\n"
    "substring_dedup:\n  enabled: true\n  min_length: 100\n  partition_bytes: 300000\n"
)


def _tree(out: Path) -> dict[str, str]:
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def _curate(inputs: Path, out: Path, cfg: Path, *extra: str, fault: str = "") -> int:
    args = ("curate", str(inputs), "--out", str(out), "--config", str(cfg), *extra)
    return run_cli(*args, check=not fault, env={"LLMPIPE_FAULT_AFTER": fault}).returncode


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("corpus_dedup")
    inputs = root / "in"
    inputs.mkdir()
    for name in ("cc-main-2019-30-extracted.jsonl.gz", "wget-crawl-0000.warc.gz"):
        shutil.copy2(data_dir / "web" / name, inputs / name)
    # a listed host of the WARC; passages of ten crawl documents as an evaluation set
    (root / "domains.txt").write_text("www.semanticscholar.org\n")
    with gzip.open(inputs / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"].split() for line in f][:300:30]
    passages = [" ".join(w[len(w) // 2 : len(w) // 2 + 30]) for w in texts if len(w) >= 60]
    (root / "eval.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in passages))
    cfg = root / "c.yaml"
    cfg.write_text(
        CONFIG
        + f"url_filter:\n  enabled: true\n  domain_lists: [{root / 'domains.txt'}]\n"
        + f"decontaminate:\n  enabled: true\n  mode: spans\n  eval_sets: {{crawl: {root / 'eval.jsonl'}}}\n"
    )
    out = root / "ref"
    _curate(inputs, out, cfg, "--workers", "2", "--chunk-mb", "0.1")
    return inputs, cfg, out


def test_stats_workers_and_kills_give_the_same_bytes(ref: tuple[Path, Path, Path], tmp_path: Path) -> None:
    inputs, cfg, out = ref
    stats = json.loads((out / "stats.json").read_text())
    by_name = {s["name"]: s for s in stats["stages"]}
    line, sub = by_name["line_dedup"], by_name["substring_dedup"]
    assert line["counters"]["lines_removed"] > 40 and line["counters"]["bytes_removed"] > 5_000
    assert sub["counters"]["spans_removed"] > 0 and sub["counters"]["bytes_removed"] > 0
    url, decont = by_name["url_filter"], by_name["decontaminate"]
    assert url["dropped"].get("url_subdomain", 0) >= 1
    assert decont["counters"]["contaminated_crawl"] >= 5 and decont["counters"]["bytes_removed"] > 0
    for s in (url, line, sub, decont):
        assert s["docs_in"] == s["docs_out"] + sum(s["dropped"].values())
    assert line["docs_out"] == sub["docs_in"]
    want = _tree(out)

    # one worker, whole files: killed in the URL filter's step (segment 0, the WARC), in the line
    # count, in the substring plan's external sort (first key file's runs written), in the
    # suffix-array pairs (several partitions), in the decontamination step (the last segment), then
    # re-run to the end
    killed = tmp_path / "killed"
    points = ("segment 0#1 written", "line_dedup counts 00000", "substring_dedup runs 000000")
    points += ("substring_dedup pair 00000-00001",)
    for point in (*points, "segment 3#0 written"):
        assert _curate(inputs, killed, cfg, "--workers", "1", fault=point) == -9, point
    _curate(inputs, killed, cfg, "--workers", "1")
    assert _tree(killed) == want
