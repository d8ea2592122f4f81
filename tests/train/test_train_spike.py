"""The loss-spike guard: an injected spike is skipped; repeated spikes roll back to the last checkpoint
and training continues past them. The decision uses the all-reduced loss, so both ranks agree (a
disagreement would deadlock or diverge the run)."""

from __future__ import annotations

import math
from pathlib import Path

from conftest import ROOT, read_metrics, torchrun


def test_spike_guard_skips_then_rolls_back(byte_shards: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = torchrun(
        2, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
        "--train.steps=30", "--train.log_every=1", "--train.val_every=0", "--checkpoint.every=10",
        "--guard.warmup=5", "--guard.max_spikes=3", "--debug.inject_spike_at_step=[15, 22]",
        "--debug.inject_spike_repeat=3", "--metrics.tensorboard=false",
    )  # fmt: skip
    recs = read_metrics(run)
    spikes = [(r["step"], r["spike_decision"]) for r in recs if "spike_decision" in r]
    # at step 15: skip, skip, then the third spike in a row rolls back to step 10; the same at 22 -> 20
    assert spikes == [
        (15, "skip"),
        (15, "skip"),
        (15, "rollback"),
        (22, "skip"),
        (22, "skip"),
        (22, "rollback"),
    ]
    assert [r["rollback_to"] for r in recs if "rollback_to" in r] == [10, 20]
    for r in recs:
        if "spike_loss" in r:
            assert r["spike_loss"] > 100  # x1000 of a loss around 2-5
    losses = [r for r in recs if "loss" in r]
    assert losses[-1]["step"] == 30 and math.isfinite(losses[-1]["loss"]) and losses[-1]["loss"] < 4
    assert all(r["loss"] < 10 for r in losses)  # no spiked batch was ever stepped on
    assert "done: 30 steps" in proc.stdout
