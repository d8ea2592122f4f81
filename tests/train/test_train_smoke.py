"""The trainer runs under real torchrun (2 processes, gloo, CPU) and learns from real text."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, read_metrics, torchrun, train_losses
from llmpipe.errors import ConfigError
from llmpipe.train.config import parse_args


def test_two_process_run_learns_and_checkpoints(byte_shards: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = torchrun(
        2, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
        "--train.steps=40", "--train.log_every=5", "--val_every=20", "--checkpoint.every=20",
        # two micro-batches of 4 per rank (global batch 16) with activation checkpointing
        "--train.grad_accum=2", "--data.batch_size=4", "--parallel.activation_checkpointing=true",
    )  # fmt: skip
    # a short start-up summary that says CPU; the whole config goes to the run directory, not the terminal
    head = proc.stdout.split("step ", 1)[0]
    assert "device: CPU, 2 process(es) (gloo)" in head and "parameters (" in head, head
    assert "memory: about" in head and "GPU" not in head and "largest micro-batch" not in head, head
    assert "optim:" not in head and len(head.splitlines()) <= 8, head
    assert "optim:" in (run / "config.yaml").read_text()
    losses = train_losses(run)
    assert sorted(losses) == [1, 5, 10, 15, 20, 25, 30, 35, 40]
    assert all(math.isfinite(v) for v in losses.values())
    # bytes of Shakespeare: ln(257) = 5.55 at the start; a model that learned anything is far below
    assert losses[1] > 5.0
    assert losses[40] < 0.7 * losses[1], losses
    vals = [r["val_loss"] for r in read_metrics(run) if "val_loss" in r]
    assert len(vals) == 3 and vals[-1] < 0.7 * vals[0], vals
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000020", "step-00000040"]
    assert (run / "config.yaml").is_file()
    assert any((run / "tensorboard").iterdir())


def test_bad_overrides_are_config_errors(byte_shards: Path, tmp_path: Path) -> None:
    base = [
        "--data",
        str(byte_shards),
        "--config",
        str(ROOT / "configs/train/tiny.yaml"),
        "--out",
        str(tmp_path),
    ]
    for bad, expect in [
        ("--train.stepz=3", "unknown key"),
        ("--train.steps=many", "expected an integer"),
        ("--steps", "expected --key=value"),
        ("--seed=1", "is in sections"),
        ("--nosuch.steps=1", "no section"),
        ("--parallel.sharding=zero3", "is not one of"),
        ("--train.val_batches=0", "train.val_batches must be at least 1"),
        # values no run can use: one line before any process group or model (not a ZeroDivisionError in
        # the model, torch's ValueError from AdamW, an error in the forward or NaN losses)
        ("--model.n_heads=0", "model.n_heads must be at least 1"),
        ("--model.n_layers=0", "model.n_layers must be at least 1"),
        ("--model.dim=0", "model.dim must be at least 1"),
        ("--model.n_kv_heads=0", "model.n_kv_heads must be at least 1"),
        ("--model.dropout=1", r"model.dropout must be in \[0, 1\)"),
        ("--model.dropout=-0.1", r"model.dropout must be in \[0, 1\)"),
        ("--optim.lr=-1e-3", "optim.lr must be a finite number >= 0"),
        ("--optim.beta1=1", r"optim.beta1 and optim.beta2 must be in \[0, 1\)"),
        ("--optim.beta2=-0.5", r"optim.beta1 and optim.beta2 must be in \[0, 1\)"),
        ("--optim.eps=0", "optim.eps must be positive"),
        ("--optim.weight_decay=-0.1", "optim.weight_decay must be >= 0"),
        ("--checkpoint.every=-1", "checkpoint.every must be >= 0"),
        ("--guard.ema=1", r"guard.ema must be in \[0, 1\)"),
        ("--guard.ema=-0.5", r"guard.ema must be in \[0, 1\)"),
        ("--train.val_every=-1", "train.val_every must be >= 0"),
    ]:
        with pytest.raises(ConfigError, match=expect):
            parse_args([*base, bad])
    # a mixture source's weight: what is wrong with it, not "no manifest.json" or a loader's message
    for source, expect in [
        (f"a={byte_shards}:abc", "the weight 'abc' is not a number"),
        (f"a={byte_shards}:inf", "the weight must be a finite non-negative number, got 'inf'"),
        (f"a={byte_shards}:nan", "the weight must be a finite non-negative number"),
        (f"a={byte_shards}:-1", "the weight must be a finite non-negative number"),
    ]:
        with pytest.raises(ConfigError, match=expect):
            parse_args(["--data", source, *base[2:]])
    _, cfg = parse_args(["--data", f"a={byte_shards}:2", "--data", f"b={byte_shards}", *base[2:]])
    assert [(s.path, s.weight) for s in cfg.data.sources] == [(byte_shards, 2.0), (byte_shards, 1.0)]
    _, cfg = parse_args([*base, "--steps=7", "--model.doc_mask=false", "--optim.lr=1e-3"])
    assert (cfg.train.steps, cfg.model.doc_mask, cfg.optim.lr) == (7, False, 1e-3)


def test_user_error_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train/pretrain.py"), "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no manifest.json" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_compiled_blocks_train_like_eager(byte_shards: Path, tmp_path: Path) -> None:
    """``parallel.compile: true`` (torch.compile of each block, inductor's C++ backend on CPU) under
    FSDP2 on 2 processes gives the eager run's losses; inductor's generated code is the evidence that
    the blocks really were compiled."""
    args = [
        "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"),
        "--train.steps=6", "--train.log_every=1", "--val_every=0", "--parallel.mixed_precision=fp32",
    ]  # fmt: skip
    torchrun(2, *args, "--out", str(tmp_path / "eager"))
    proc = torchrun(
        2, *args, "--out", str(tmp_path / "compiled"), "--parallel.compile=true",
        timeout=600, env={"TORCH_LOGS": "output_code"},
    )  # fmt: skip
    assert "def call(" in proc.stdout + proc.stderr, "no inductor output code: the blocks were not compiled"
    eager, compiled = train_losses(tmp_path / "eager"), train_losses(tmp_path / "compiled")
    assert sorted(eager) == sorted(compiled) == [1, 2, 3, 4, 5, 6]
    for step, loss in eager.items():
        assert math.isclose(compiled[step], loss, rel_tol=1e-4), (step, loss, compiled[step])
