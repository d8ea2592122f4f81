"""``line_dedup`` and ``substring_dedup`` in real curate runs: a run with ``--workers 2`` in 0.1 MB
chunks and a ``--workers 1`` run of whole files killed (SIGKILL) in the line count, then in the
suffix-array pairs, then re-run, give the same bytes; their stages are in stats.json with the bytes
they removed.
"""

from __future__ import annotations

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
    cfg = root / "c.yaml"
    cfg.write_text(CONFIG)
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
    for s in (line, sub):
        assert s["docs_in"] == s["docs_out"] + sum(s["dropped"].values())
    assert line["docs_out"] == sub["docs_in"]
    want = _tree(out)

    # one worker, whole files: killed in the line count, then in the suffix-array pairs (several
    # partitions), then re-run to the end
    killed = tmp_path / "killed"
    for point in ("line_dedup counts 00000", "substring_dedup pair 00000-00001"):
        assert _curate(inputs, killed, cfg, "--workers", "1", fault=point) == -9, point
    _curate(inputs, killed, cfg, "--workers", "1")
    assert _tree(killed) == want
