"""ZeRO stages by name (``--parallel.zero=1|2|3``, train/zero.py) under real torchrun (2 gloo processes,
CPU, fp32): the three stages and DDP (``sharding: none``) train the same model on the same global batch to
the same losses, a stage-1 checkpoint resumes at stage 3 as if the run had never stopped, and a stage that
contradicts the other parallel keys is one error line. Memory per stage: tests/train/test_train_plan.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, torchrun, train_losses
from llmpipe.errors import ConfigError
from llmpipe.train.config import ParallelConfig
from llmpipe.train.parallel import resolve_layout

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--model.n_layers=4", "--data.batch_size=4",
    "--train.steps=6", "--train.log_every=1", "--train.val_every=0", "--checkpoint.every=3",
    "--parallel.mixed_precision=fp32", "--metrics.tensorboard=false",
]  # fmt: skip


def train(run: Path, shards: Path, *extra: str) -> dict[int, float]:
    torchrun(2, "--data", str(shards), "--out", str(run), *COMMON, *extra)
    return train_losses(run)


def assert_same_run(got: dict[int, float], want: dict[int, float], what: str) -> None:
    assert sorted(got) == sorted(want), (what, got)
    for step, loss in want.items():
        assert abs(got[step] - loss) <= 1e-6 * loss, (what, step, got[step], loss)


def test_zero_stages_match_ddp_and_a_stage_1_checkpoint_resumes_at_stage_3(
    byte_shards: Path, tmp_path: Path
) -> None:
    ddp = train(tmp_path / "ddp", byte_shards, "--parallel.sharding=none")
    assert sorted(ddp) == [1, 2, 3, 4, 5, 6] and ddp[6] < ddp[1]
    for z in (1, 2, 3):
        assert_same_run(train(tmp_path / f"zero{z}", byte_shards, f"--parallel.zero={z}"), ddp, f"zero={z}")

    # stage 1's step-3 checkpoint (whole weights, sharded AdamW moments) resumed at stage 3: steps 4-6
    run = tmp_path / "zero1-at-zero3"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "zero1/checkpoints/step-00000003", run / "checkpoints/step-00000003")
    got = train(run, byte_shards, "--parallel.zero=3")
    assert sorted(got) == [4, 5, 6], got
    assert_same_run(got, {s: ddp[s] for s in got}, "zero=1 resumed at zero=3")


@pytest.mark.parametrize(
    ("world", "kw", "expect"),
    [
        (2, {"zero": 2, "sharding": "none"}, "parallel.sharding=none replicates everything"),
        (2, {"zero": 1, "dp_replicate": 2}, "this layout has dp_shard 1 (dp_replicate 2)"),
        (2, {"zero": 1, "cpu_offload": True}, "it runs with zero=3, not zero=1"),
        (4, {"zero": 1, "tp": 2}, "parallel.zero=1 runs with tp=1, pp=1 and cp=1"),
    ],
)
def test_contradictory_zero_settings_are_one_line_config_errors(world: int, kw: dict, expect: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expect)) as e:
        resolve_layout(ParallelConfig(**kw), world)
    assert "\n" not in str(e.value)
    # what does fit: a stage over every data-parallel rank, or within hybrid groups
    assert resolve_layout(ParallelConfig(zero=1), 2).dp_shard == 2
    assert resolve_layout(ParallelConfig(zero=2, sharding="hybrid", shard_size=2), 4).dp_replicate == 2


def test_zero_1_and_2_refuse_the_models_they_are_not_built_for() -> None:
    from llmpipe.train.model import ModelConfig

    moe = ModelConfig(dim=64, n_layers=2, n_heads=4)
    moe.moe.experts, moe.moe.top_k = 4, 2
    t5 = ModelConfig(dim=64, n_layers=2, n_heads=4, arch="encoder_decoder")
    enc = ModelConfig(dim=64, n_layers=2, n_heads=4, arch="encoder")
    cases = ((moe, "a mixture of experts"), (t5, "model.arch=encoder_decoder"), (enc, "model.arch=encoder"))
    for model, what in cases:
        for z in (1, 2):
            with pytest.raises(ConfigError, match=f"zero={z} is not built for {re.escape(what)}"):
                resolve_layout(ParallelConfig(zero=z), 2, model)
        assert resolve_layout(ParallelConfig(zero=3), 2, model).dp_shard == 2
