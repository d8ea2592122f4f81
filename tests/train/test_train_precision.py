"""fp16 with the loss scaler (an injected overflow is skipped and counted, the scale halves, training goes
on), FSDP2 CPU offload (same losses as without), and layouts that cannot work (one-line errors)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, read_metrics, torchrun, train_losses
from llmpipe.errors import ConfigError
from llmpipe.train.config import ParallelConfig
from llmpipe.train.model import ModelConfig
from llmpipe.train.parallel import resolve_layout

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--train.steps=6", "--train.log_every=1",
    "--train.val_every=0", "--metrics.tensorboard=false", "--data.batch_size=4",
]  # fmt: skip


def test_fp16_overflow_is_skipped_and_the_scale_drops(byte_shards: Path, tmp_path: Path) -> None:
    run = tmp_path / "fp16"
    proc = torchrun(
        2, "--data", str(byte_shards), "--out", str(run), *COMMON, "--parallel.mixed_precision=fp16",
        "--debug.inject_overflow_at_step=[3]", "--parallel.fp16_init_scale=1024",
    )  # fmt: skip
    recs = read_metrics(run)
    skipped = [r for r in recs if "skipped_steps" in r and "loss" not in r]
    assert [(r["step"], r["skipped_steps"], r["loss_scale"]) for r in skipped] == [(3, 1, 512.0)]
    losses = [r for r in recs if "loss" in r]
    assert [r["step"] for r in losses] == [1, 2, 3, 4, 5, 6]  # step 3 retried on the next batch
    assert all(math.isfinite(r["loss"]) for r in losses)
    assert losses[-1]["loss"] < losses[0]["loss"]
    assert losses[-1]["skipped_steps"] == 1 and losses[-1]["loss_scale"] == 512.0
    assert "done: 6 steps" in proc.stdout


def test_cpu_offload_gives_the_losses_of_the_run_without(byte_shards: Path, tmp_path: Path) -> None:
    args = ["--data", str(byte_shards), *COMMON, "--parallel.mixed_precision=fp32"]
    torchrun(2, *args, "--out", str(tmp_path / "plain"))
    proc = torchrun(2, *args, "--out", str(tmp_path / "offload"), "--parallel.cpu_offload=true")
    line = proc.stdout.split("cpu offload: ", 1)[1].splitlines()[
        0
    ]  # "N of M parameter shards in host memory"
    on_cpu, total = int(line.split(" of ")[0]), int(line.split(" of ")[1].split()[0])
    assert on_cpu == total > 0
    plain, offload = train_losses(tmp_path / "plain"), train_losses(tmp_path / "offload")
    assert sorted(plain) == sorted(offload) == [1, 2, 3, 4, 5, 6]
    for step, loss in plain.items():
        assert abs(offload[step] - loss) <= 1e-6 * loss, (step, loss, offload[step])


@pytest.mark.parametrize(
    ("world", "kw", "model", "expect"),
    [
        (2, {"tp": 2}, {"n_heads": 3, "dim": 96}, "must divide model.n_heads 3"),
        (4, {"tp": 2, "dp_shard": 3}, {}, "does not multiply to the world size 4"),
        (3, {"tp": 2}, {}, "does not divide the world size 3"),
        (4, {"pp": 4}, {"n_layers": 2}, "more stages than model.n_layers 2"),
        (
            2,
            {"pp": 2, "pp_schedule": "interleaved_1f1b"},
            {"n_layers": 3},
            "more stages than model.n_layers 3",
        ),
        (1, {"cpu_offload": True}, {}, "needs more than one data-parallel rank"),
        (4, {"cp": 2, "pp": 2}, {}, "parallel.cp > 1 runs with parallel.pp=1"),
        (4, {"cp": 2, "tp": 4}, {}, "x parallel.cp 2 does not divide the world size 4"),
    ],
)
def test_bad_layouts_are_one_line_config_errors(world: int, kw: dict, model: dict, expect: str) -> None:
    with pytest.raises(ConfigError, match=expect) as e:
        resolve_layout(ParallelConfig(**kw), world, ModelConfig(**model))
    assert "\n" not in str(e.value)


def test_bad_layout_from_the_command_line(byte_shards: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train/pretrain.py"), "--data", str(byte_shards), "--out", str(tmp_path),
         "--parallel.tp=2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: parallel.tp 2 x parallel.pp 1 does not divide the world size 1"
    ], proc.stderr
