"""Learning-rate schedules, the batch schedule and the mixture's command line and config checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmpipe.errors import ConfigError
from llmpipe.train.config import parse_args
from llmpipe.train.optim import lr_factor
from llmpipe.train.schedule import BatchSchedule


def test_lr_schedules_after_the_warmup() -> None:
    total, warm, lo = 100, 10, 0.1
    for kind in ("cosine", "linear", "wsd", "constant"):
        assert [lr_factor(s, warm, total, lo, kind) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert lr_factor(55, warm, total, lo, "linear") == pytest.approx(1 - 0.9 * 0.5)
    assert lr_factor(55, warm, total, lo, "cosine") == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor(100, warm, total, lo, "linear") == pytest.approx(lo)
    assert {lr_factor(s, warm, total, lo, "constant") for s in range(10, 120)} == {1.0}
    # wsd: the peak until the last 20% of the steps, then linear to the minimum
    assert {lr_factor(s, warm, total, lo, "wsd") for s in range(10, 81)} == {1.0}
    assert lr_factor(90, warm, total, lo, "wsd") == pytest.approx(1 - 0.9 * 0.5)
    assert lr_factor(100, warm, total, lo, "wsd") == pytest.approx(lo)


def test_batch_schedule_doubles_by_tokens_and_counts_samples() -> None:
    s = BatchSchedule(micro_global=16, seq_len=128, grad_accum=8, ramp_start=2, ramp_tokens=3 * 16 * 128 * 12)
    # 2 doublings (2 -> 4 -> 8) over 576 samples: 288 at 32 per step (9 steps), 288 at 64 (5 steps: 320)
    assert [s.accum(i) for i in (0, 8, 9, 13, 14, 100)] == [2, 2, 4, 4, 8, 8]
    assert s.samples_before(9) == 9 * 32 and s.samples_before(14) == 9 * 32 + 5 * 64
    assert s.samples_before(20) == s.samples_before(14) + 6 * 128
    assert s.lr_scale(0, "sqrt") == pytest.approx(0.5) and s.lr_scale(0, "linear") == 0.25
    assert not BatchSchedule(16, 128, 8, 1, 0).ramped
    with pytest.raises(ConfigError, match="power of 2"):
        BatchSchedule(16, 128, 6, 4, 1000)


def test_data_sources_from_the_command_line(tmp_path: Path) -> None:
    _, cfg = parse_args(["--out", "r", "--data", "web=shards/web:0.49", "--data", "fin=/d/fin:x:0.51"])
    got = [(s.name, str(s.path), s.weight) for s in cfg.data.sources]
    # absolute, so the run directory's config.yaml works from any directory
    web = str(Path("shards/web").absolute())
    assert got == [("web", web, 0.49), ("fin", "/d/fin:x", 0.51)] and cfg.data.path is None
    _, cfg = parse_args(["--out", "r", "--data", "shards/"])
    assert cfg.data.path == Path("shards").absolute() and cfg.data.sources == []
    with pytest.raises(ConfigError, match="names must be unique"):
        parse_args(["--out", "r", "--data", "a=x:1", "--data", "a=y:1"])
    with pytest.raises(ConfigError, match=r"unknown source\(s\) \['c'\]"):
        parse_args(
            [
                "--out",
                "r",
                "--data",
                "a=x:1",
                "--data",
                "b=y:1",
                "--data.stages=[{from_step: 5, weights: {c: 1}}]",
            ]
        )
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("data:\n  path: x\n  sources: [{name: a, path: y}]\n")
    with pytest.raises(ConfigError, match="not both"):
        parse_args(["--out", "r", "--config", str(cfg_file)])
