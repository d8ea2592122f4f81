"""Training on a weighted mixture: per-source metrics, a staged mixture, exact resume 2 -> 1 ranks, a source
that runs out, and a batch-size ramp, all through `torchrun train/pretrain.py` as a user runs it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, read_metrics, torchrun, train_losses
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.train.byte_shards import write_byte_shards
from llmpipe.train.optim import lr_factor
from llmpipe.train.schedule import BatchSchedule

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"),
    "--train.log_every=1", "--train.val_every=0", "--train.val_batches=2",
    "--parallel.mixed_precision=fp32", "--metrics.tensorboard=false", "--optim.warmup_steps=2",
]  # fmt: skip


@pytest.fixture(scope="module")
def two_sources(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    books, out = data_dir / "reference" / "books", tmp_path_factory.mktemp("sources")
    return (
        write_byte_shards(books / "tiny-shakespeare.txt", out / "plays", max_chars=200_000),
        write_byte_shards(books / "wonderland.txt", out / "alice", max_chars=60_000, val_fraction=0.1),
    )


def test_staged_mixture_metrics_and_exact_resume_on_fewer_ranks(
    two_sources: tuple[Path, Path], tmp_path: Path
) -> None:
    plays, alice = two_sources
    data = ["--data", f"plays={plays}:0.7", "--data", f"alice={alice}:0.3"]
    staged = [
        *COMMON,
        *data,
        "--train.steps=10",
        "--checkpoint.every=5",
        "--data.stages=[{from_step: 6, weights: {alice: 1}}]",
    ]
    full = tmp_path / "full"
    torchrun(2, "--out", str(full), *staged)
    recs = read_metrics(full)
    logs = {r["step"]: r for r in recs if "loss" in r}
    assert sorted(logs) == list(range(1, 11))
    # tokens per source: 16 samples x 64 targets per step; from step 6 on only alice grows
    for s in range(1, 11):
        assert logs[s]["tokens/plays"] + logs[s]["tokens/alice"] == pytest.approx(16 * 64 * s, rel=0.01)
    assert logs[6]["tokens/plays"] == logs[10]["tokens/plays"] > logs[1]["tokens/plays"]
    assert logs[10]["samples/alice"] - logs[6]["samples/alice"] == 4 * 16
    share = logs[6]["tokens/plays"] / (logs[6]["tokens/plays"] + logs[6]["tokens/alice"])
    assert abs(share - 0.7) < 0.05
    events = [r for r in recs if "data_event" in r]
    assert [(e["step"], e["event_position"]) for e in events] == [(6, 6 * 16)]
    assert "weights plays=0, alice=1" in events[0]["data_event"]
    vals = [r for r in recs if "val_loss" in r]
    assert vals and all("val_loss/plays" in r and "val_loss/alice" in r for r in vals)

    # the 2-rank run's step-5 checkpoint (mid-mixture, before the stage) continued on 1 rank
    one = tmp_path / "one"
    (one / "checkpoints").mkdir(parents=True)
    shutil.copytree(full / "checkpoints" / "step-00000005", one / "checkpoints" / "step-00000005")
    proc = torchrun(1, "--out", str(one), *staged, "--data.batch_size=16")
    assert "at step 5" in proc.stdout
    ref, resumed = train_losses(full), train_losses(one)
    assert sorted(resumed) == list(range(6, 11))
    for s in resumed:  # the same samples and weights; only the order of float sums differs
        assert abs(resumed[s] - ref[s]) <= 1e-5 * ref[s], (s, resumed, ref)
    last = {r["step"]: r for r in read_metrics(one) if "loss" in r}[10]
    assert {k: v for k, v in last.items() if "/" in k} == {k: v for k, v in logs[10].items() if "/" in k}


def test_a_capped_source_stops_the_run_and_says_so(two_sources: tuple[Path, Path], tmp_path: Path) -> None:
    """data.sources in YAML (max_epochs is not in the CLI form): alice runs out, the run stops and says so."""
    plays, alice = two_sources
    cfg = tmp_path / "mix.yaml"
    cfg.write_text(
        "model: {dim: 32, n_layers: 1, n_heads: 2}\n"
        "data:\n  batch_size: 32\n  on_exhausted: stop\n  sources:\n"
        f"    - {{name: plays, path: {plays}, weight: 0.5}}\n"
        f"    - {{name: alice, path: {alice}, weight: 0.5, max_epochs: 1}}\n"
    )
    run = tmp_path / "capped"
    args = [a for a in COMMON[2:]]  # no tiny.yaml: this config is the run's
    proc = torchrun(1, "--config", str(cfg), "--out", str(run), *args, "--train.steps=500")
    assert "source alice (max_epochs 1) exhausted: the data ends here" in proc.stdout
    assert "the data ended after step" in proc.stdout
    (ckpt,) = (run / "checkpoints").iterdir()
    state = torch.load(ckpt / "train_state.pt", weights_only=True)
    n_alice = len(ShardDataset(alice))
    assert state["step"] < 500
    # every alice sample once, less the part of the last global batch that did not fill
    assert n_alice - 32 < state["loader"]["source_samples"][1] <= n_alice


def test_batch_ramp_follows_the_schedule(byte_shards: Path, tmp_path: Path) -> None:
    run = tmp_path / "ramp"
    ramp = ["--train.grad_accum=4", "--train.ramp_start=1", "--train.ramp_tokens=8192", "--train.steps=12"]
    torchrun(2, "--data", str(byte_shards), "--out", str(run), *COMMON, *ramp, "--data.batch_size=4")
    sched = BatchSchedule(8, 64, 4, 1, 8192)  # micro-batch of 4 x 2 ranks, seq_len 64
    # 8192 tokens = 128 samples: 64 at 8 per step (8 steps), 64 at 16 (4 steps), then the full 32
    assert [sched.accum(s) for s in range(14)] == [1] * 8 + [2] * 4 + [4] * 2
    logs = {r["step"]: r for r in read_metrics(run) if "loss" in r}
    assert [logs[s]["global_batch"] for s in range(1, 13)] == [8] * 8 + [16] * 4
    # the sqrt rule: the lr is the schedule's times sqrt(batch / full batch)
    for s in range(1, 12):
        want = 3e-3 * lr_factor(s, 2, 12, 0.1) * (sched.accum(s) / 4) ** 0.5
        assert logs[s]["lr"] == pytest.approx(want), s
    (ckpt,) = (run / "checkpoints").iterdir()
    state = torch.load(ckpt / "train_state.pt", weights_only=True)
    assert state["loader"]["consumed"] == sched.samples_before(12) == 128


def test_a_ramp_regroups_the_same_sample_stream(byte_shards: Path) -> None:
    """Steps of a ramp take consecutive micro-batches: the samples, in order, are a no-ramp run's."""
    ds = ShardDataset(byte_shards, "train")
    sched = BatchSchedule(4, 64, 8, 1, 64 * 4 * 12)
    assert sched.ramped and sched.accum(0) == 1 and sched.accum(40) == 8
    ramped, plain = iter(TokenLoader(ds, 4, seed=2)), iter(TokenLoader(ds, 4 * 8, seed=2))
    rows = []
    for step in range(12):  # what Trainer._batches does
        rows += [next(ramped).input for _ in range(sched.accum(step))]
    got = torch.cat(rows)
    assert len(got) == sched.samples_before(12)
    want = torch.cat([next(plain).input for _ in range(-(-len(got) // 32))])[: len(got)]
    assert torch.equal(got, want)
