"""Many tiny inputs (issue 21, item 14): consecutive small files run as one part, so the work
directory holds files and markers per part, not per input; grouping changes no output byte, the
funnel and the quarantine still name every input, and a run killed inside a group resumes to the
same bytes."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import llmpipe.curate.pipeline as pipeline
import pytest
from conftest import run_cli
from llmpipe.curate.settings import CurateConfig

FILES = 200
CONFIG = (
    "pack:\n  seq_len: 64\n  samples_per_shard: 500\n  val_fraction: 0.05\n"
    "tokenizer:\n  vocab_size: 300\n  sample_bytes: 400000\n"
)
BAD = {17, 150}  # inputs with a line that is not JSON, in the middle of a group


def _tree(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path]:
    """200 JSONL files of three real crawl documents each (two of them with a bad line), in 4 folders."""
    root = tmp_path_factory.mktemp("tiny")
    lines = gzip.decompress(
        (data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes()
    ).splitlines(keepends=True)
    for k in range(FILES):
        body = lines[3 * k : 3 * k + 3]
        if k in BAD:
            body.insert(1, b"{not json\n")
        d = root / "in" / f"{k % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"t{k:03d}.jsonl").write_bytes(b"".join(body))
    cfg = root / "cfg.yaml"
    cfg.write_text(CONFIG)
    return root / "in", cfg


@pytest.fixture(scope="module")
def grouped(tiny: tuple[Path, Path]) -> tuple[Path, str]:
    """A run of the tiny inputs, its work directory kept; and its stdout."""
    inputs, cfg = tiny
    out = inputs.parent / "grouped"
    p = run_cli("curate", str(inputs), "--out", str(out), "--config", str(cfg), "--keep-work", "--quiet")
    return out, p.stdout


def test_tiny_inputs_run_in_few_parts_and_give_the_bytes_of_one_part_each(
    tiny: tuple[Path, Path], grouped: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs, cfg = tiny
    grouped, stdout = grouped
    parts = int(stdout.split(" input(s) in ")[1].split()[0])
    assert f"{FILES} input(s)" in stdout and parts <= FILES // 50, stdout  # 64 tiny files a part
    # per-input work files (documents, dedup keys, quarantine, tokens, markers) are numbered by part
    work = grouped / ".llmpipe-work"
    per_part = [f for f in work.rglob("*") if f.is_file() and f.name[:6].isdigit()]
    assert {int(f.name[:6]) for f in per_part} == set(range(parts))
    segments = list(work.glob("seg*"))
    assert len(segments) == 2  # exact and near dedup resolve (their keys from one pass) between two
    assert len(list(work.rglob("*.done.json"))) == (len(segments) + 1) * parts  # and tokenize

    stats = json.loads((grouped / "stats.json").read_text())
    assert stats["inputs"]["files"] == FILES and stats["inputs"]["formats"] == {"jsonl": FILES}
    assert stats["retention"]["docs_in"] == 3 * FILES + len(BAD)
    bad = [json.loads(x) for x in (grouped / "quarantine.jsonl").read_text().splitlines()]
    # each record names its own input and line, not the first input of its part
    assert [(b["source"], b["location"]) for b in bad] == [
        (f"{k % 4}/t{k:03d}.jsonl", "line 2") for k in sorted(BAD, key=lambda k: (k % 4, k))
    ]

    # the same run with one input per part (as before grouping): the same bytes
    monkeypatch.setattr(pipeline, "GROUP_FILES", 1)
    single = tmp_path / "single"
    pipeline.run_curate([str(inputs)], single, CurateConfig.load(cfg), progress=False, log=lambda m: None)
    assert len(pipeline.plan_parts(sorted(inputs.rglob("*.jsonl")), 1 << 27)) == FILES
    assert _tree(single) == _tree(grouped)
    assert (single / "quarantine.jsonl").read_bytes() == (grouped / "quarantine.jsonl").read_bytes()


def test_killed_inside_a_group_resumes_to_the_same_bytes(
    tiny: tuple[Path, Path], grouped: tuple[Path, str], tmp_path: Path
) -> None:
    inputs, cfg = tiny
    ref = grouped[0]
    out = tmp_path / "out"
    args = ("curate", str(inputs), "--out", str(out), "--config", str(cfg), "--quiet", "--workers", "1")
    for point in ("segment 0#1 written", "tokenize#2"):
        p = run_cli(*args, check=False, env={"LLMPIPE_FAULT_AFTER": point})
        assert p.returncode == -9, (point, p.stdout, p.stderr)
    run_cli(*args)
    assert _tree(out) == _tree(ref)


def test_strict_names_the_input_with_the_bad_line(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    inputs, cfg = tiny
    p = run_cli(
        "curate", str(inputs), "--out", str(tmp_path / "o"), "--config", str(cfg), "--strict", check=False
    )
    assert p.returncode != 0
    # two inputs have a bad line; with several workers either may be read first
    assert re.search(r"t(017|150)\.jsonl: line 2: invalid_json", p.stderr), p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
