"""Bad invocations give one clear line and exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli


def test_missing_path(tmp_path: Path) -> None:
    p = run_cli("curate", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2
    assert "no such file or directory" in p.stderr
    assert "Traceback" not in p.stderr


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    p = run_cli("curate", str(tmp_path / "in"), "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2
    assert "holds no input files" in p.stderr
    assert "Traceback" not in p.stderr


def test_unknown_config_key(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello world " * 10}) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pack:\n  seq_lenn: 8\n")
    p = run_cli(
        "curate", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "o"), "--config", str(cfg), check=False
    )
    assert p.returncode == 2
    assert "unknown key(s) ['seq_lenn']" in p.stderr
    assert "Traceback" not in p.stderr


def test_wrong_config_type(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello world " * 10}) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pack:\n  seq_len: long\n")
    p = run_cli(
        "curate", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "o"), "--config", str(cfg), check=False
    )
    assert p.returncode == 2
    assert "pack.seq_len: expected an integer" in p.stderr


def test_every_command_has_help() -> None:
    from llmpipe.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert sub.choices, "no commands registered"
    for name in sub.choices:
        p = run_cli(name, "--help")
        assert "usage: llmpipe" in p.stdout, name


def test_sweep_and_scaling_bad_input(tmp_path: Path) -> None:
    """Both read a YAML before Ray starts: a misspelt key or a directory without shards is one line."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"data: {tmp_path}\nout: {tmp_path / 'o'}\nspacee: {{optim.lr: {{grid: [0.1]}}}}\n")
    ladder = tmp_path / "ladder.yaml"
    sizes = "[{dim: 16}, {dim: 32}, {dim: 64}]"
    ladder.write_text(f"data: {tmp_path}\nout: {tmp_path / 'o'}\nsizes: {sizes}\nsteps: [10]\n")
    cases = {
        "sweep": (["sweep", str(sweep)], "unknown key(s) ['spacee']"),
        "scaling": (["scaling", str(ladder)], "is not a shard directory written by `llmpipe curate`"),
    }
    for name, (argv, message) in cases.items():
        p = run_cli(*argv, check=False)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2, (name, p.returncode, p.stderr)
        assert len(lines) == 1 and lines[0].startswith("llmpipe: error:") and message in lines[0], (
            name,
            p.stderr,
        )
