"""FSDP2 gradients over 2 gloo processes equal a single process on the whole global batch."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT, torchrun


def test_fsdp_gradients_match_single_process(byte_shards: Path) -> None:
    proc = torchrun(2, str(ROOT / "tests/train/grad_check.py"), str(byte_shards), timeout=300)
    # matched anywhere, not per line: the two ranks' lines share one pipe
    diffs = re.findall(
        r"rank (\d) (\w+): mesh \([\d, ]+\), \d+ parameters, worst rel diff ([-+.e\d]+|nan)", proc.stdout
    )
    inits = re.findall(r"rank (\d) (\w+): sharded init equals unsharded init: (True|False)", proc.stdout)
    # full sharding, replication (2x1 mesh) and hybrid (2-D mesh), on both ranks
    runs = {(r, s) for r in "01" for s in ("full", "none", "hybrid")}
    assert {(r, s) for r, s, _ in diffs} == runs and len(diffs) == 6, proc.stdout
    assert {(r, s) for r, s, _ in inits} == runs and all(ok == "True" for *_, ok in inits), proc.stdout
    for rank, sharding, diff in diffs:
        assert float(diff) <= 1e-5, (rank, sharding, diff)
