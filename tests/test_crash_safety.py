"""`llmpipe curate` killed with SIGKILL at named points, then re-run, gives the bytes of an uninterrupted run.

The kill is deterministic: ``LLMPIPE_FAULT_AFTER=<point>`` makes the process SIGKILL itself when it
reaches ``<point>`` (``llmpipe.curate.workdir.fault_point``). Points cover every phase: a per-input
step with its output written but not renamed, renamed but without its marker, after its marker; the
global dedup resolve; the tokenizer; tokenizing; moving the shards into place; the stats; the
clean-up of the work directory.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

SMALL = (
    "pack:\n  seq_len: 64\n  samples_per_shard: 2000\n  val_fraction: 0.05\n"
    "tokenizer:\n  vocab_size: 400\n  sample_bytes: 300000\n"
)
INPUTS = (
    "wget-crawl-0000.warc.gz",
    "cc-2009-sample.arc",
    "cc-main-2019-30-extracted.jsonl.gz",
    "truncated-record.warc.gz",  # a quarantined record is part of the output too
)


def _tree(out: Path) -> dict[str, str]:
    """Every file under ``out`` (hidden ones included) -> sha256 of its bytes."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("crash")
    inputs = root / "in"
    inputs.mkdir()
    for name in INPUTS:
        shutil.copy2(data_dir / "web" / name, inputs / name)
    cfg = root / "small.yaml"
    cfg.write_text(SMALL)
    ref = root / "ref"
    run_cli("curate", str(inputs), "--out", str(ref), "--config", str(cfg))
    tree = _tree(ref)
    shards = [f for f in tree if f.endswith(".arrow")]
    assert len([f for f in shards if f.startswith("train-")]) >= 2, "the test needs several shards"
    assert {"manifest.json", "stats.json", "tokenizer.json", "quarantine.jsonl"} <= set(tree)
    # the crawl path is in the funnel: every WARC/ARC record read, skipped ones counted, then extract
    stats = json.loads((ref / "stats.json").read_text())
    read, extract = stats["stages"][:2]
    assert (read["name"], extract["name"]) == ("read", "extract")
    assert read["docs_in"] == 48 + 9 + 697 + 1  # records of the four inputs (see test_readers)
    assert read["dropped"]["skipped_request_record"] == 22
    assert read["dropped"]["quarantined_truncated_record"] == 1
    assert extract["tokens_in"] > extract["tokens_out"]  # raw HTML words -> main-text words
    assert stats["inputs"]["formats"] == {"arc": 1, "jsonl": 1, "warc": 2}
    return inputs, cfg, tree


def _curate(inputs: Path, out: Path, cfg: Path, fault: str | None = None) -> int:
    env = {"LLMPIPE_FAULT_AFTER": fault} if fault else {"LLMPIPE_FAULT_AFTER": ""}
    # one worker: the points below are in the order a sequential run reaches them (tests/test_workers.py
    # kills a run with several workers)
    args = ("curate", str(inputs), "--out", str(out), "--config", str(cfg), "--workers", "1")
    p = run_cli(*args, check=fault is None, env=env)
    return p.returncode


def _no_partial_shard(out: Path, ref: dict[str, str]) -> None:
    """Whatever a killed run left in the output directory is a complete file of the final output."""
    for p in out.iterdir():
        if p.is_file() and not p.name.startswith("."):
            assert ref.get(p.name) == hashlib.sha256(p.read_bytes()).hexdigest(), p.name


#: in the order a run reaches them
POINTS = [
    "segment 0#0 written",  # first input read and filtered, output not yet renamed into place
    "segment 0#1 committed",  # output renamed, marker not yet written
    "segment 0#2",  # third input's marker written
    "segment 1#0",  # after the global dedup resolve, applying its drops
    # tokenizer trained, nothing tokenized: as soon as the last segment's first parts hold the
    # sample (here its first two), before its other parts run
    "tokenizer",
    "segment 1#1",
    "tokenize#0",
    "moved train-00000.arrow",  # some shards moved into place, no manifest yet
    "stats",
    "outputs",  # every output in place, work directory not yet removed
    "work removed",  # ... removed, completion stamp not yet written
]


def test_killed_at_every_point_in_turn(setup: tuple[Path, Path, dict[str, str]], tmp_path: Path) -> None:
    """Each run resumes what the previous killed one left and is killed further on; the last finishes."""
    inputs, cfg, ref = setup
    out = tmp_path / "out"
    for point in POINTS:
        assert _curate(inputs, out, cfg, fault=point) == -9, f"the run was not killed at {point!r}"
        _no_partial_shard(out, ref)
    _curate(inputs, out, cfg)
    assert _tree(out) == ref
    # a finished run is not redone
    p = run_cli("curate", str(inputs), "--out", str(out), "--config", str(cfg))
    assert "already complete" in p.stdout
    assert _tree(out) == ref
    # ... unless what says it finished is damaged (a truncated file, another JSON type): then it is
    # done again, to the same bytes, where trusting it would be a traceback or a claim of shards that
    # do not read
    for name, bad in ((".llmpipe-done.json", "{bad"), ("stats.json", "[]"), ("manifest.json", '{"a": 1')):
        (out / name).write_text(bad)
        p = run_cli("curate", str(inputs), "--out", str(out), "--config", str(cfg), "--workers", "1")
        assert "already complete" not in p.stdout and "Traceback" not in p.stderr, (name, p.stderr)
        assert _tree(out) == ref, name


@pytest.mark.parametrize("point", ["segment 0#1 committed", "moved train-00000.arrow", "work removed"])
def test_killed_once_from_scratch(
    setup: tuple[Path, Path, dict[str, str]], tmp_path: Path, point: str
) -> None:
    inputs, cfg, ref = setup
    out = tmp_path / "out"
    assert _curate(inputs, out, cfg, fault=point) == -9, f"the run was not killed at {point!r}"
    _no_partial_shard(out, ref)
    _curate(inputs, out, cfg)
    assert _tree(out) == ref


def test_a_damaged_work_stamp_starts_the_work_over(
    setup: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    """The work directory's fingerprint.json damaged after a kill (here: a list): its work is not
    trusted, the run starts over and writes the same bytes, without a traceback."""
    inputs, cfg, ref = setup
    out = tmp_path / "out"
    assert _curate(inputs, out, cfg, fault="segment 0#1 committed") == -9
    (out / ".llmpipe-work" / "fingerprint.json").write_text("[]")
    _curate(inputs, out, cfg)
    assert _tree(out) == ref


def test_changed_input_invalidates_unfinished_work(
    setup: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    """Work left by a killed run for other inputs is not reused; stale shards do not survive."""
    inputs, cfg, ref = setup
    other = tmp_path / "in"
    shutil.copytree(inputs, other)
    out = tmp_path / "out"
    assert _curate(other, out, cfg, fault="tokenize#0") == -9
    (other / "cc-2009-sample.arc").unlink()
    _curate(other, out, cfg)
    assert _tree(out) != ref
    _curate(inputs, out, cfg)
    assert _tree(out) == ref


def test_the_tokenizer_trains_once_the_first_parts_hold_its_sample(tmp_path: Path, data_dir: Path) -> None:
    """A sample the first parts of the last segment hold is trained on as soon as they are done, while
    the other parts still run: a run with one worker (the parts in order) killed right after training
    has not finished the segment; resumed, it gives the bytes of an uninterrupted run, whose tokenizer
    is the one trained on the same sample after the segment (``TrainTokenizer`` on every part)."""
    from llmpipe.curate.settings import TokenizerConfig
    from llmpipe.curate.stages.tokenize import TrainTokenizer
    from llmpipe.curate.workdir import WORK

    text = (data_dir / "reference" / "books" / "wonderland.txt").read_text(encoding="utf-8")
    paras = [" ".join(p.split()) for p in text.split("\n\n") if len(p.split()) >= 60]
    inputs = tmp_path / "in"
    inputs.mkdir()
    with (inputs / "book.jsonl").open("w") as f:
        for k, p in enumerate(paras):
            f.write(json.dumps({"id": str(k), "text": p}) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "language: {enabled: false}\ngopher_quality: {enabled: false}\nc4: {enabled: false}\n"
        "tokenizer: {vocab_size: 400, sample_bytes: 12000}\npack: {seq_len: 64}\n"
    )
    args = ("curate", str(inputs), "--config", str(cfg), "--workers", "1", "--chunk-mb", "0.01")

    ref = tmp_path / "ref"
    run_cli(*args, "--out", str(ref), "--keep-work")
    segs = sorted((ref / WORK).glob("seg*"))
    last = segs[-1]
    parts = sorted(last.glob("*.done.json"))
    assert len(segs) == 2 and len(parts) >= 6, (segs, parts)  # a segment after dedup, several parts
    sizes = [json.loads(p.read_text())["sample_bytes"] for p in parts]
    assert sum(sizes[:2]) < 12000 <= sum(sizes[:-2]), sizes  # the sample lies in the first parts, not all
    whole = tmp_path / "tok.json"
    TrainTokenizer(TokenizerConfig(vocab_size=400, sample_bytes=12000), lambda _: None).run(
        sorted(last.glob("*.arrow")), whole
    )
    assert whole.read_bytes() == (ref / "tokenizer.json").read_bytes()

    out = tmp_path / "out"
    env = {"LLMPIPE_FAULT_AFTER": "tokenizer"}
    assert run_cli(*args, "--out", str(out), check=False, env=env).returncode == -9
    assert (out / WORK / "tokenizer.json").exists()
    done = sorted((out / WORK / last.name).glob("*.done.json"))
    assert 0 < len(done) < len(parts)  # trained before the segment's last parts ran
    run_cli(*args, "--out", str(out))
    shutil.rmtree(ref / WORK)
    assert _tree(out) == _tree(ref)
