"""Helpers for the trainer tests: byte-level shards of real text, and running torchrun as a user would.

The shards hold the UTF-8 bytes of real text (ids 0-255, EOS 256; train/byte_shards.py), written by
the real ShardWriter with a real HF tokenizer.json (byte-level, no merges); `llmpipe curate` output
works the same way.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from llmpipe.train.byte_shards import write_byte_shards

ROOT = Path(__file__).resolve().parents[2]


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """``build(path)`` once per test session, also when pytest-xdist runs it on several processes: they
    share the session's temp root, and a file lock there lets the first build it and the others wait.
    Only for read-only fixtures (the tests copy before they change anything)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        path = tmp_path_factory.mktemp(name) / name
        build(path)
        return path
    root = tmp_path_factory.getbasetemp().parent / "shared-fixtures"  # one per session, shared by workers
    root.mkdir(exist_ok=True)
    path, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)  # a worker that failed to build it left a part
            build(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def byte_shards(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    src = data_dir / "reference" / "books" / "tiny-shakespeare.txt"
    return built_once(tmp_path_factory, "shakespeare", lambda path: write_byte_shards(src, path))


@pytest.fixture(scope="session")
def trained_run(byte_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few hundred steps of the tiny model on Shakespeare's bytes (shared by the export, eval and
    quantize tests)."""

    def train(run: Path) -> None:
        torchrun(
            2, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
            "--train.steps=300", "--train.log_every=50", "--train.val_every=100", "--train.val_batches=8",
            "--data.batch_size=4", "--checkpoint.every=100", "--model.n_kv_heads=2",
            "--model.tie_embeddings=true", timeout=600,
        )  # fmt: skip

    return built_once(tmp_path_factory, "trained-run", train)


@pytest.fixture(scope="session")
def genuine_run(byte_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four steps of the tiny model on one process, checkpoints at steps 2 and 4: the run directory the
    tests of what a run directory may hold (pickles, damage) copy and tamper with."""
    run = tmp_path_factory.mktemp("genuine") / "run"
    torchrun(
        1, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
        "--train.steps=4", "--checkpoint.every=2", "--checkpoint.keep=2", "--metrics.tensorboard=false",
        "--train.val_every=0", "--train.log_every=1",
    )  # fmt: skip
    return run


@pytest.fixture(scope="session")
def hf_export(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``llmpipe export`` of the trained run."""
    from llmpipe.cli import main

    def export(out: Path) -> None:
        assert main(["export", str(trained_run), "--out", str(out)]) == 0

    return built_once(tmp_path_factory, "hf-export", export)


#: literal special-token strings in ordinary text: curate must encode them as text, never as the ids
LITERAL_SPECIALS = ("<mask>", "<pad>", "<extra_id_0>")


def curate_reserving(path: Path, data_dir: Path) -> None:
    """``llmpipe curate`` of the bundled sample plus one real text that holds the literal strings of the
    special tokens, with ``--special-tokens mlm,t5``: a BPE of 512 ids whose <mask>, <pad> and 100
    sentinels are reserved (ids 1..102)."""
    from llmpipe.cli import main

    raw = path.with_name(path.name + "-raw")
    shutil.copytree(ROOT / "examples" / "raw", raw)
    text = (data_dir / "reference" / "books" / "wonderland.txt").read_text(encoding="utf-8")
    paras = [" ".join(p.split()) for p in text.split("\n\n")[40:52]]
    doc = "\n\n".join(p.replace(" ", f" {LITERAL_SPECIALS[i % 3]} ", 1) for i, p in enumerate(paras))
    (raw / "specials.jsonl").write_text(json.dumps({"id": "alice", "text": doc}) + "\n", encoding="utf-8")
    args = [
        "curate",
        str(raw),
        "--out",
        str(path),
        "--seq-len",
        "64",
        "--vocab-size",
        "512",
        "--workers",
        "1",
    ]
    assert main([*args, "--special-tokens", "mlm,t5", "--quiet"]) == 0


@pytest.fixture(scope="session")
def special_shards(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """Curated shards whose tokenizer reserves <mask>, <pad> and the T5 sentinels (``curate_reserving``)."""
    return built_once(tmp_path_factory, "special-shards", lambda path: curate_reserving(path, data_dir))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(
    nproc: int, *args: str, timeout: int = 300, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc_per_node=N -m llmpipe.train ARGS`` (or a script given first: train/pretrain.py,
    a check script), as a user runs it: the installed package, nothing added to the import path."""
    entry = [args[0]] if args and args[0].endswith(".py") else ["-m", "llmpipe.train"]
    rest = args[1:] if args and args[0].endswith(".py") else args
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1", f"--master_port={free_port()}", *entry, *rest,
    ]  # fmt: skip
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
        )
    return proc


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir) if "loss" in r}
