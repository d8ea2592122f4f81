"""FSDP2 gradients over 2 gloo processes equal a single process on the whole global batch."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, torchrun


def test_fsdp_gradients_match_single_process(byte_shards: Path) -> None:
    proc = torchrun(2, str(ROOT / "tests/train/grad_check.py"), str(byte_shards), timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("rank ") and "worst" in ln]
    inits = [ln for ln in proc.stdout.splitlines() if "sharded init equals unsharded init" in ln]
    assert len(inits) == 6 and all(ln.endswith("True") for ln in inits), proc.stdout
    # full sharding, replication (2x1 mesh) and hybrid (2-D mesh), on both ranks
    assert len(lines) == 6, proc.stdout
    for ln in lines:
        assert float(ln.rsplit(" ", 1)[1]) <= 1e-5, ln
