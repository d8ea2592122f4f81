"""The trainer loses nothing silently (issue 21): a diverged run stops with exit code 3 instead of
rolling back forever; a damaged latest checkpoint falls back to the previous intact one; a replaced
tokenizer.json is refused by the trainer and by the HF export; the run directory is locked; bad
shard directories and --out paths give one line. Real torchrun processes on real byte shards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, read_metrics, torchrun
from llmpipe.lock import DirLock

TINY = str(ROOT / "configs/train/tiny.yaml")
QUIET = ["--metrics.tensorboard=false", "--train.val_every=0", "--train.log_every=1"]


def _one_line(proc: subprocess.CompletedProcess[str], rc: int, text: str) -> None:
    """One ``error:`` line and exit code ``rc`` (torchrun itself exits 1 and names the worker's code)."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0, proc.stderr[-3000:]
    if "torch.distributed.run" in proc.args:
        assert f"exitcode  : {rc}" in proc.stderr, proc.stderr[-3000:]
    else:
        assert proc.returncode == rc, (proc.returncode, proc.stderr[-3000:])
    assert errors and text in errors[0], proc.stderr[-3000:]
    # no traceback from our code (torchrun prints its own for a worker that exits non-zero)
    # (a virtual environment may live inside the checkout, so only our own source folders count)
    for ours in ("python", "train"):
        assert f'File "{ROOT / ours}' not in proc.stderr, proc.stderr[-3000:]


def test_a_diverged_run_stops_after_bounded_rollbacks(byte_shards: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = torchrun(
        1, "--data", str(byte_shards), "--config", TINY, "--out", str(run), "--train.steps=60",
        "--optim.lr=1000", "--optim.warmup_steps=1", "--checkpoint.every=5", "--guard.max_rollbacks=2", *QUIET,
        check=False, timeout=240,
    )  # fmt: skip
    _one_line(proc, 3, "training diverged at step")
    recs = read_metrics(run)
    assert len([r for r in recs if "rollback_to" in r]) == 2  # guard.max_rollbacks
    # no step with a non-finite loss or gradient norm was ever applied
    assert all(r["loss"] == r["loss"] and abs(r["loss"]) != float("inf") for r in recs if "loss" in r)


def test_damaged_checkpoint_falls_back_and_tokenizer_is_checked(byte_shards: Path, tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shutil.copytree(byte_shards, shards)
    run = tmp_path / "run"
    args = ["--data", str(shards), "--config", TINY, "--out", str(run), "--checkpoint.every=4", *QUIET]
    torchrun(1, *args, "--train.steps=8", "--checkpoint.keep=3")
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-00000004", "step-00000008"]
    distcp = sorted((ckpts / "step-00000008").glob("*.distcp"))[0]
    with open(distcp, "r+b") as f:  # a truncated shard file in the latest checkpoint
        f.truncate(distcp.stat().st_size // 2)
    proc = torchrun(1, *args, "--train.steps=10", "--checkpoint.keep=3")
    assert "step-00000008 is damaged" in proc.stdout and "falling back" in proc.stdout
    assert "resumed from" in proc.stdout and "at step 4" in proc.stdout
    assert (ckpts / "damaged-step-00000008").is_dir() and (ckpts / "step-00000010").is_dir()
    (ckpts / "step-00000010" / "train_state.pt").unlink()  # the other damage of the issue
    proc = torchrun(1, *args, "--train.steps=11", "--checkpoint.keep=3")
    assert "step-00000010 is damaged (train_state.pt is missing)" in proc.stdout
    assert "at step 8" in proc.stdout

    # the shards' tokenizer replaced: the trainer and the export refuse it with one line
    tok = shards / "tokenizer.json"
    tok.write_text(json.dumps(json.loads(tok.read_text()), indent=1))
    proc = torchrun(1, *args, "--train.steps=12", check=False)
    _one_line(proc, 2, "not the tokenizer the shards were made with")
    exp = subprocess.run(
        [sys.executable, str(ROOT / "train" / "export_hf.py"), str(run), "--out", str(tmp_path / "hf")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    _one_line(exp, 2, "not the tokenizer the shards were made with")
    assert not (tmp_path / "hf").exists()


def test_run_directory_lock_and_bad_paths(byte_shards: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    base = ["--data", str(byte_shards), "--config", TINY, *QUIET, "--train.steps=2"]
    with DirLock(run, "run directory"):
        proc = torchrun(1, *base, "--out", str(run), check=False)
    _one_line(proc, 2, f"in use by another run (pid {os.getpid()} on ")
    (tmp_path / "file").write_text("x")
    proc = torchrun(1, *base, "--out", str(tmp_path / "file"), check=False)
    _one_line(proc, 2, "is a file, not a directory")
    # a manifest without splits
    broken = tmp_path / "broken"
    shutil.copytree(byte_shards, broken)
    m = json.loads((broken / "manifest.json").read_text())
    del m["splits"]
    (broken / "manifest.json").write_text(json.dumps(m))
    proc = torchrun(1, *base[2:], "--data", str(broken), "--out", str(tmp_path / "r2"), check=False)
    _one_line(proc, 2, "the manifest has no splits")
    # too few samples for one global batch: the advice names a batch size that fits
    n = json.loads((byte_shards / "manifest.json").read_text())["splits"]["train"]["rows"]
    proc = torchrun(1, *base, "--out", str(tmp_path / "r3"), f"--data.batch_size={n + 1}", check=False)
    _one_line(proc, 2, f"lower --data.batch_size to at most {n}")


def test_shards_without_a_val_split_are_noted_at_the_start(data_dir: Path, tmp_path: Path) -> None:
    """Shards with no val samples (as configs/curate/web.yaml on a small input writes them): the trainer
    says at the start that it measures no val_loss, instead of logging none without a word."""
    from llmpipe.train.byte_shards import write_byte_shards

    src = data_dir / "reference" / "books" / "tiny-shakespeare.txt"
    shards = write_byte_shards(src, tmp_path / "no-val", max_chars=30_000, val_fraction=0.0)
    run = tmp_path / "run"
    proc = torchrun(1, "--data", str(shards), "--config", TINY, "--out", str(run), "--train.steps=2", *QUIET)
    note = f"note: {shards}: its val split holds no samples, so this run measures no val_loss on it"
    assert note in proc.stdout, proc.stdout[-3000:]
    assert all(r.get("val_loss") is None for r in read_metrics(run))


def test_a_val_split_smaller_than_the_ranks_is_noted(byte_shards: Path) -> None:
    """Each data-parallel rank needs one val sample: a split with fewer is skipped, and said so at the
    start (as an empty one is), not left without a word."""
    from llmpipe.data import ShardDataset
    from llmpipe.train.data import RunData, val_notices

    val = ShardDataset(byte_shards, "val")
    n = len(val)
    assert n > 0
    data = RunData(None, None, {"": val})  # type: ignore[arg-type]  # only the val splits are read
    assert val_notices(data, dp=n) == []
    (note,) = val_notices(data, dp=n + 1)
    assert f"its val split holds {n} sample(s), fewer than the {n + 1} data-parallel ranks" in note
    assert "measures no val_loss" in note
    (note,) = val_notices(data, dp=1, batch_size=n + 1, pipeline=True)
    assert f"fewer than data.batch_size {n + 1}" in note


def test_two_single_process_runs_at_once(byte_shards: Path, tmp_path: Path) -> None:
    """``python -m llmpipe.train`` without torchrun, twice at once on one machine: both finish (the
    process group's store listens on a port the OS picks, not on a fixed one that the other run, or
    anything else, holds: the test holds the old fixed port 29511 while they run)."""
    import socket

    env = {
        k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "MASTER_ADDR", "RANK", "WORLD_SIZE")
    }
    env["OMP_NUM_THREADS"] = "1"
    base = [sys.executable, "-m", "llmpipe.train", "--data", str(byte_shards), "--config", TINY, *QUIET]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 29511))
        held.listen()
        procs = [
            subprocess.Popen(
                [*base, "--out", str(tmp_path / name), "--train.steps=3"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for name in ("a", "b")
        ]
        results = [(*p.communicate(timeout=240), p.returncode) for p in procs]
    for out, err, rc in results:
        assert rc == 0 and "done: 3 steps" in out, err[-3000:]
    assert all((tmp_path / name / "checkpoints" / "step-00000003").is_dir() for name in ("a", "b"))
