"""Curate loses nothing silently (issue 21): inputs named twice, output directories among the inputs,
unreadable or symlinked directories, files the run depends on replaced in place, a second run on the
same --out, a run that keeps nothing, and bad arguments that must give one line, never a traceback.

Inputs are cut from the real crawl data; unreadable paths are made with chmod, and when the tests run
as root the command runs with the capabilities that bypass file permissions dropped (setpriv)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from llmpipe.cli import main
from llmpipe.curate.workdir import fingerprint
from llmpipe.io.discover import discover
from llmpipe.lock import DirLock

SAMPLE = ROOT / "configs" / "curate" / "sample.yaml"
NO_DAC = [
    "setpriv",
    "--inh-caps=-dac_override,-dac_read_search",
    "--bounding-set=-dac_override,-dac_read_search",
]


def _lines(data_dir: Path, n: int) -> bytes:
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rb") as f:
        return b"".join(next(f) for _ in range(n))


def _unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``args`` so that file permissions apply (root bypasses them unless its capabilities go)."""
    prefix = NO_DAC if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=300)


def _one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("llmpipe: error: ") and "\n" not in err, (rc, err)
    return err


def test_an_input_named_many_ways_is_read_once(data_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(data_dir / "web" / "cc-en-head-0091.jsonl", d / "a.jsonl")
    shutil.copy(data_dir / "web" / "cc-en-head-0174.jsonl", d / "b.jsonl")
    (tmp_path / "link").symlink_to(d)
    (tmp_path / "a-link.jsonl").symlink_to(d / "a.jsonl")
    names = [str(d), str(d / "a.jsonl"), f"{d}/../in", str(tmp_path / "link"), str(tmp_path / "a-link.jsonl")]
    assert discover(names) == [(d / "a.jsonl").resolve(), (d / "b.jsonl").resolve()]


def test_output_directories_among_the_inputs_are_left_out(data_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_bytes(_lines(data_dir, 120))
    run_cli("curate", str(d), "--out", str(d / "o1"), "--config", str(SAMPLE), "--quiet")
    # a second run, its --out in the same directory: neither its own nor the first run's output is read
    p = run_cli("curate", str(d), "--out", str(d / "o2"), "--config", str(SAMPLE), "--quiet")
    assert "1 input(s)" in p.stdout and "o1: an llmpipe output directory is not an input" in p.stdout
    stats = json.loads((d / "o2" / "stats.json").read_text())
    assert stats["inputs"]["files"] == 1 and stats["quarantine"]["records"] == 0
    assert any(
        s.endswith("o1: an llmpipe output directory is not an input") for s in stats["inputs"]["skipped"]
    )
    assert (d / "o2" / "quarantine.jsonl").read_bytes() == b""
    assert stats["retention"]["docs_in"] == 120


def test_unreadable_and_symlinked_directories_are_reported_or_followed(
    data_dir: Path, tmp_path: Path
) -> None:
    d, other = tmp_path / "in", tmp_path / "other"
    (d / "locked").mkdir(parents=True)
    other.mkdir()
    shutil.copy(data_dir / "web" / "cc-en-head-0091.jsonl", d / "a.jsonl")
    shutil.copy(data_dir / "web" / "cc-en-head-0174.jsonl", d / "locked" / "hidden-from-me.jsonl")
    shutil.copy(data_dir / "web" / "cc-en-head-0174.jsonl", other / "b.jsonl")
    (d / "linked").symlink_to(other)  # out of the inputs: followed with follow_symlinks only
    (d / "loop").symlink_to(d)  # followed once: no loop
    (d / "unreadable.jsonl").write_bytes(b"")
    os.chmod(d / "locked", 0)
    os.chmod(d / "unreadable.jsonl", 0)
    try:
        code = (
            "import json; from llmpipe.io.discover import discover_inputs\n"
            f"r = discover_inputs([{str(d)!r}], follow_symlinks=True)\n"
            "print(json.dumps({'files': [str(f) for f in r.files], 'skipped': r.skipped}))"
        )
        p = _unprivileged(sys.executable, "-c", code)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)
        assert got["files"] == [str((d / "a.jsonl").resolve()), str((other / "b.jsonl").resolve())]
        assert len(got["skipped"]) == 2
        assert any("locked: unreadable directory" in s for s in got["skipped"])
        assert any("unreadable.jsonl: unreadable file" in s for s in got["skipped"])
        # a named unreadable file, and an --out that cannot be written: one line each
        exe = str(Path(sys.executable).with_name("llmpipe"))
        p = _unprivileged(exe, "curate", str(d / "unreadable.jsonl"), "--out", str(tmp_path / "o"))
        assert p.returncode == 2 and "cannot read the file" in p.stderr and "Traceback" not in p.stderr
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        p = _unprivileged(exe, "curate", str(d / "a.jsonl"), "--out", str(ro))
        assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr
        p = _unprivileged(
            exe, "curate", str(d), "--out", str(tmp_path / "o"), "--strict", "--follow-symlinks"
        )
        assert p.returncode == 2 and "locked: unreadable directory" in p.stderr and "--strict" in p.stderr
    finally:
        os.chmod(d / "locked", 0o755)


def test_a_file_the_config_names_is_fingerprinted_by_its_bytes(data_dir: Path, tmp_path: Path) -> None:
    """A quality model (or tokenizer) replaced at the same path, same size and mtime, is new work."""
    model = tmp_path / "model.bin"
    model.write_bytes((data_dir / "web" / "cc-en-head-0091.jsonl").read_bytes()[:5000])
    inp = tmp_path / "a.jsonl"
    inp.write_bytes(_lines(data_dir, 5))
    config = {"quality_model": {"model": str(model), "threshold": 0.5}}
    before = fingerprint([inp], ["a.jsonl"], config, {})
    st = model.stat()
    model.write_bytes((data_dir / "web" / "cc-en-head-0174.jsonl").read_bytes()[:5000])
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert model.stat().st_size == st.st_size and model.stat().st_mtime_ns == st.st_mtime_ns
    assert fingerprint([inp], ["a.jsonl"], config, {}) != before


def test_a_second_run_on_the_same_out_names_the_holder(data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(_lines(data_dir, 5))
    out = tmp_path / "o"
    out.mkdir()
    with DirLock(out):
        p = run_cli("curate", str(tmp_path / "a.jsonl"), "--out", str(out), check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"in use by another run (pid {os.getpid()} on " in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_run_that_keeps_nothing_fails(data_dir: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in _lines(data_dir, 30).splitlines()]
    # real ids, texts cut to their first word: every document falls to the length filter
    (tmp_path / "a.jsonl").write_text(
        "".join(
            json.dumps({"id": r.get("url", i), "text": (r["text"].split() or ["x"])[0]}) + "\n"
            for i, r in enumerate(rows)
        )
    )
    p = run_cli(
        "curate",
        str(tmp_path / "a.jsonl"),
        "--out",
        str(tmp_path / "o"),
        "--config",
        str(SAMPLE),
        check=False,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "no document was kept (30 read" in p.stderr
    assert (tmp_path / "o" / "stats.json").is_file()  # the report says why


def test_quarantine_is_streamed_to_disk(tmp_path: Path, data_dir: Path) -> None:
    """Peak memory does not grow with the number of quarantined records (100,000 bad lines here)."""
    good = _lines(data_dir, 40)
    (tmp_path / "a.jsonl").write_bytes(good + b'{"text": "cut\n' * 100_000)
    code = (
        "import re, sys\nfrom pathlib import Path\nfrom llmpipe.curate.pipeline import run_curate\n"
        "from llmpipe.curate.settings import CurateConfig\n"
        f"run_curate([{str(tmp_path / 'a.jsonl')!r}], Path({str(tmp_path / 'o')!r}), "
        f"CurateConfig.load({str(SAMPLE)!r}), log=lambda m: None)\n"
        "print(int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)) // 1024)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    peak = int(p.stdout.split()[-1])
    lines = (tmp_path / "o" / "quarantine.jsonl").read_text().splitlines()
    assert len(lines) == 100_000 and json.loads(lines[-1])["location"] == "line 100040"
    print("peak RSS MB", peak)
    assert peak < 250  # ~170 MB streamed; holding 100,000 records in memory (~1.9 kB each) peaked at 322 MB


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--seq-len", "0"], "pack.seq_len must be at least 2"),
        (["--tokenizer", "{tmp}/nope.json"], "no such file"),
        (["--tokenizer", "{tmp}"], "a directory, not a file"),
        (["--out", "{tmp}/a.jsonl"], "a.jsonl: is a file, not a directory"),
        (["--out", "{tmp}/a.jsonl/below"], "a.jsonl is a file, not a directory"),
        (["--config", "{tmp}/pattern.yaml"], "unknown name 'foo'"),
        (["--config", "{tmp}/size.yaml"], "read.max_doc_bytes must be positive"),
    ],
)
def test_bad_curate_arguments_give_one_line(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    (tmp_path / "a.jsonl").write_bytes(_lines(data_dir, 5))
    (tmp_path / "pattern.yaml").write_text("tokenizer:\n  pattern: foo\n")
    (tmp_path / "size.yaml").write_text("read:\n  max_doc_bytes: -1\n")
    args = [a.format(tmp=tmp_path) for a in argv]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "o")]
    assert expected in _one_line_error(capsys, "curate", str(tmp_path / "a.jsonl"), *args, "--quiet")


CALIBRATE = ["quality", "calibrate", "{shards}", "--model", "m", "--target-retention", "0.5", "--sample-docs"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["inspect", "{shards}", "--sample", "-1"], "argument --sample: must be >= 0"),
        ([*CALIBRATE, "0"], "argument --sample-docs: must be >= 1, got 0"),
        ([*CALIBRATE, "-4"], "argument --sample-docs: must be >= 1, got -4"),
        (["plan", "--params", "0"], "argument --params: must be > 0"),
        (["plan", "--params", "1B", "--gpus", "0"], "argument --gpus: must be > 0"),
        (["plan", "--params", "1B", "--mfu", "0"], "argument --mfu: must be in (0, 1]"),
        (["plan", "--params", "1e400"], "argument --params: not a finite number: '1e400'"),
        (["plan", "--params", "inf"], "argument --params: not a finite number: 'inf'"),
        (["plan", "--params", "nan"], "argument --params: not a finite number: 'nan'"),
        (["plan", "--params", "-1B"], "argument --params: must be > 0, got '-1B'"),
        (["plan", "--params", "1B", "--tokens", "-5"], "argument --tokens: must be > 0, got '-5'"),
        (["plan", "--params", "1B", "--tokens", "nan"], "argument --tokens: not a finite number"),
        (["plan", "--params", "1B", "--tokens", "0"], "argument --tokens: must be > 0"),
        (["plan", "--params", "1B", "--seq-len", "0"], "argument --seq-len: must be > 0"),
        (["plan", "--params", "1B", "--micro-batch", "0"], "argument --micro-batch: must be > 0"),
        (["plan", "--params", "1B", "--microbatches", "0"], "argument --microbatches: must be > 0"),
        (["plan", "--params", "1B", "--tp", "-1"], "argument --tp: must be > 0, got '-1'"),
        (["plan", "--params", "1B", "--gpu-memory", "inf"], "argument --gpu-memory: not a finite number"),
        (["plan", "--params", "1B", "--retention", "nan"], "argument --retention: not a finite number"),
        (["plan", "--params", "1B", "--trainable-fraction", "2"], "--trainable-fraction: must be in [0, 1]"),
    ],
)
def test_bad_arguments_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as e:  # argparse: usage and one error line, exit 2
        main([a.format(shards=tmp_path) for a in argv])
    assert e.value.code == 2 and expected in capsys.readouterr().err


def test_missing_model_manifest_and_ray_address(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.jsonl").write_bytes(_lines(data_dir, 5))
    err = _one_line_error(
        capsys, "quality", "calibrate", "--model", str(tmp_path / "nope.bin"), "--target-retention", "0.3",
        str(tmp_path / "a.jsonl"),
    )  # fmt: skip
    assert "no such model file" in err
    shards = tmp_path / "shards"
    shards.mkdir()
    manifest = {"format": "llmpipe-shards", "format_version": 1, "seq_len": 8, "dtype": "uint16"}
    (shards / "manifest.json").write_text(json.dumps(manifest))
    assert "the manifest has no tokenizer, counts, splits" in _one_line_error(capsys, "inspect", str(shards))
    with socket.socket() as s:  # a port with nothing listening: refused at once, not retried for minutes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = _one_line_error(
        capsys,
        "curate",
        str(tmp_path / "a.jsonl"),
        "--out",
        str(tmp_path / "o"),
        "--ray",
        f"127.0.0.1:{port}",
    )
    assert "no Ray cluster answers there" in err
