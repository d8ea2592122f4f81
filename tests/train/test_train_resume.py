"""Exact resume from DCP checkpoints: same losses as an uninterrupted run, also on another rank count."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import ROOT, read_metrics, torchrun, train_losses

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"),
    "--train.steps=14", "--train.log_every=1", "--train.val_every=0", "--checkpoint.every=5",
    "--checkpoint.keep=3", "--parallel.mixed_precision=fp32", "--metrics.tensorboard=false",
]  # fmt: skip


def last_losses(run: Path) -> dict[int, float]:
    """Per step, the loss logged last (a resumed run logs again the steps after its checkpoint)."""
    return train_losses(run)


def test_exact_resume_same_and_fewer_ranks(byte_shards: Path, tmp_path: Path) -> None:
    data = ["--data", str(byte_shards)]
    full, cut = tmp_path / "full", tmp_path / "cut"
    torchrun(2, *data, "--out", str(full), *COMMON)
    reference = last_losses(full)
    assert sorted(reference) == list(range(1, 15))

    # killed after step 7: the last checkpoint is step 5 (written asynchronously)
    proc = torchrun(2, *data, "--out", str(cut), *COMMON, "--debug.stop_after_step=7")
    assert "stopping as if killed" in proc.stdout
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == ["step-00000005"]
    proc = torchrun(2, *data, "--out", str(cut), *COMMON)
    assert "resumed from" in proc.stdout and "at step 5" in proc.stdout
    resumed = last_losses(cut)
    for step in range(6, 15):
        assert resumed[step] == reference[step], (step, resumed[step], reference[step])
    steps_logged = [r["step"] for r in read_metrics(cut) if "loss" in r]
    assert steps_logged == [*range(1, 8), *range(6, 15)]  # 6 and 7 again after the restart
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == [
        "step-00000005", "step-00000010", "step-00000014",
    ]  # fmt: skip

    # a 2-process checkpoint restored on 1 process, global batch kept (8 x 2 ranks = 16 x 1 rank)
    one = tmp_path / "one"
    (one / "checkpoints").mkdir(parents=True)
    shutil.copytree(full / "checkpoints" / "step-00000010", one / "checkpoints" / "step-00000010")
    proc = torchrun(1, *data, "--out", str(one), *COMMON, "--data.batch_size=16")
    assert "at step 10" in proc.stdout
    single = last_losses(one)
    assert sorted(single) == [11, 12, 13, 14]
    for step in single:  # the same data and weights; only the order of float sums differs
        assert abs(single[step] - reference[step]) <= 1e-5 * reference[step], (step, single, reference)
