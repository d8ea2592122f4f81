"""Tensor, pipeline and 2-D (data x tensor) parallel runs under real torchrun (gloo, CPU, fp32) give the
losses and the gradients of one process training the same model on the same global batch, and a
checkpoint written at one layout resumes at another as if the run had never stopped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, torchrun, train_losses

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--model.n_layers=4",
    "--train.steps=10", "--train.log_every=1", "--train.val_every=0", "--checkpoint.every=5",
    "--parallel.mixed_precision=fp32", "--metrics.tensorboard=false", "--debug.dump_grads=true",
]  # fmt: skip
GLOBAL_BATCH = 8


def train(n: int, run: Path, shards: Path, *extra: str, dp: int = 1) -> dict[int, float]:
    torchrun(
        n,
        "--data",
        str(shards),
        "--out",
        str(run),
        *COMMON,
        f"--data.batch_size={GLOBAL_BATCH // dp}",
        *extra,
    )
    return train_losses(run)


def grads(run: Path) -> dict[str, torch.Tensor]:
    """The first step's gradients by parameter name (pipeline ranks each wrote their own stages')."""
    out: dict[str, torch.Tensor] = {}
    for f in sorted((run / "grads").glob("rank-*.pt")):
        out.update(torch.load(f))
    return out


def assert_same_run(got: dict[int, float], want: dict[int, float], what: str) -> None:
    assert sorted(got) == sorted(want), (what, got)
    for step, loss in want.items():
        assert abs(got[step] - loss) <= 1e-5 * loss, (what, step, got[step], loss)


def assert_same_grads(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], what: str) -> None:
    assert sorted(got) == sorted(want), what
    for name, g in want.items():
        rel = float((got[name] - g).abs().max() / g.abs().max())
        assert rel <= 1e-5, (what, name, rel)


@pytest.fixture(scope="module")
def reference(byte_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("layouts") / "one-process"
    train(1, run, byte_shards)
    return run


@pytest.mark.parametrize(
    "layout",
    [
        ["--parallel.tp=2"],
        ["--parallel.pp=2", "--parallel.pp_schedule=gpipe"],
        ["--parallel.pp=2", "--parallel.pp_schedule=1f1b", "--parallel.pp_microbatches=4"],
        ["--parallel.pp=2", "--parallel.pp_schedule=interleaved_1f1b"],
    ],
    ids=["tp2", "pp2-gpipe", "pp2-1f1b", "pp2-interleaved"],
)
def test_two_process_layout_matches_one_process(
    layout: list[str], reference: Path, byte_shards: Path, tmp_path: Path
) -> None:
    got = train(2, tmp_path / "run", byte_shards, *layout)
    assert_same_run(got, train_losses(reference), str(layout))
    assert_same_grads(grads(tmp_path / "run"), grads(reference), str(layout))


def test_dp2_x_tp2_matches_and_resumes_at_dp4_and_on_one_process(
    reference: Path, byte_shards: Path, tmp_path: Path
) -> None:
    want = train_losses(reference)
    two_d = tmp_path / "dp2xtp2"
    got = train(4, two_d, byte_shards, "--parallel.tp=2", "--parallel.loss_parallel=true", dp=2)
    assert_same_run(got, want, "dp2 x tp2")
    assert_same_grads(grads(two_d), grads(reference), "dp2 x tp2")

    # its step-5 checkpoint resumed at dp=4 (no tp) and on one process: steps 6-10 as uninterrupted
    for name, n, dp in (("dp4", 4, 4), ("one", 1, 1)):
        run = tmp_path / name
        (run / "checkpoints").mkdir(parents=True)
        shutil.copytree(two_d / "checkpoints" / "step-00000005", run / "checkpoints" / "step-00000005")
        got = train(n, run, byte_shards, "--debug.dump_grads=false", dp=dp)
        assert sorted(got) == [6, 7, 8, 9, 10], (name, got)
        assert_same_run(got, {s: want[s] for s in got}, f"resumed at {name}")


def test_context_parallel_matches_and_resumes_at_cp1(
    reference: Path, byte_shards: Path, tmp_path: Path
) -> None:
    """cp=2 (2 processes) and cp=2 x tp=2 (4 processes) on packed rows with the document mask: the one
    process's losses and gradients; the cp=2 run's step-5 checkpoint resumed at cp=1 goes on as if
    uninterrupted (cp changes no parameter shape: DCP reshards it like a data-parallel dimension)."""
    want = train_losses(reference)
    for name, n, extra in (
        ("cp2", 2, ["--parallel.cp=2"]),
        ("cp2xtp2", 4, ["--parallel.cp=2", "--parallel.tp=2"]),
    ):
        run = tmp_path / name
        got = train(n, run, byte_shards, "--model.doc_mask=true", *extra)
        assert_same_run(got, want, name)
        assert_same_grads(grads(run), grads(reference), name)
    run = tmp_path / "cp1"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "cp2" / "checkpoints" / "step-00000005", run / "checkpoints" / "step-00000005")
    got = train(1, run, byte_shards, "--debug.dump_grads=false")
    assert sorted(got) == [6, 7, 8, 9, 10], got
    assert_same_run(got, {s: want[s] for s in got}, "cp2 resumed at cp1")
