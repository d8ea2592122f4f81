"""`llmpipe plan` for tensor-, pipeline- and context-parallel layouts against the peak tensor memory a rank of the
real trainer uses at that layout (2 gloo processes, CPU, fp32, two optimizer steps), within 20% as the
single-process estimate is (tests/test_plan.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT, torchrun

MODEL = ["model.dim=256", "model.n_layers=4", "model.n_heads=8", "data.batch_size=16"]


@pytest.mark.parametrize(
    "layout", ["parallel.tp=2", "parallel.pp=2", "parallel.cp=2"], ids=["tp2", "pp2-1f1b", "cp2"]
)
def test_layout_estimate_within_20_percent_of_the_measured_peak(layout: str, byte_shards: Path) -> None:
    proc = torchrun(
        2, str(ROOT / "tests/train/plan_check.py"), str(byte_shards), str(ROOT / "configs/train/tiny.yaml"),
        *MODEL, layout,
    )  # fmt: skip
    # "rank R: measured M estimated E", matched anywhere: the two ranks' lines share one pipe
    rows = re.findall(r"rank (\d): measured (\d+) estimated (\d+)", proc.stdout)
    assert sorted(r[0] for r in rows) == ["0", "1"], proc.stdout
    for row in rows:
        measured, estimated = int(row[1]), int(row[2])
        assert measured > 20e6  # a real model's worth of tensors was counted
        assert abs(estimated - measured) / measured < 0.20, (layout, row)


def test_zero_stages_memory_within_20_percent_of_the_plan(byte_shards: Path) -> None:
    """ZeRO 1, 2, 3 on 2 ranks, one after the other in one launch: each stage's measured peak is within
    20% of `llmpipe plan --strategy zeroN` for that run (FSDP2's resized storages counted)."""
    proc = torchrun(
        2, str(ROOT / "tests/train/plan_check.py"), str(byte_shards), str(ROOT / "configs/train/tiny.yaml"),
        *MODEL, "zero=1,2,3",
    )  # fmt: skip
    rows = re.findall(r"rank (\d) zero=(\d): measured (\d+) estimated (\d+)", proc.stdout)
    assert sorted((r[0], r[1]) for r in rows) == [(r, z) for r in "01" for z in "123"], proc.stdout
    for rank, z, m, e in rows:
        measured, estimated = int(m), int(e)
        assert measured > 20e6
        assert abs(estimated - measured) / measured < 0.20, (z, rank, measured, estimated)
