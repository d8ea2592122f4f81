"""The README as a newcomer meets it: its Commands table lists every subcommand, and every ``bash``
example runs as written after `make demo` (``console`` examples need a cluster, GPUs or a bucket).

The examples run in a scratch directory laid out like the repository root (examples/, configs/ and
train/ linked in), after the two steps of `make demo` that make out/demo, with the environment's
commands on PATH: exactly what a user types."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from llmpipe.cli import COMMANDS

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(README.read_text())]


def commands_table() -> str:
    text = README.read_text()
    return text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]


def test_every_block_says_what_it_is() -> None:
    kinds = [kind for kind, _ in blocks()]
    assert kinds and set(kinds) <= {"bash", "console", "yaml"}, kinds
    assert kinds.count("bash") >= 5


def test_commands_table_lists_every_subcommand() -> None:
    names = {c.__name__.rsplit(".", 1)[1] for c in COMMANDS}
    table = commands_table()
    listed = set(re.findall(r"^\| `llmpipe (\w+)", table, re.M))
    assert listed == names, (sorted(names - listed), sorted(listed - names))
    assert "-m llmpipe.train" in table
    help_text = subprocess.run(
        [str(Path(sys.executable).with_name("llmpipe")), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in names:
        assert re.search(rf"^\s+{name}\b", help_text, re.M), name


@pytest.mark.slow
def test_bash_examples_run_as_written(tmp_path: Path) -> None:
    for name in ("examples", "configs", "train"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "OMP_NUM_THREADS": "1",
    }
    demo = [  # the Makefile's demo target, less the build
        "llmpipe curate examples/raw --out out/demo/shards --config configs/curate/sample.yaml",
        "llmpipe inspect out/demo/shards --verify",
        "torchrun --standalone --nproc_per_node=2 train/pretrain.py --data out/demo/shards "
        "--config configs/train/tiny.yaml --out out/demo/run",
    ]
    makefile = (ROOT / "Makefile").read_text()
    assert (
        "--config configs/curate/sample.yaml" in makefile and "--config configs/train/tiny.yaml" in makefile
    )
    examples = [code for kind, code in blocks() if kind == "bash"]
    for code in [*demo, *examples]:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, (
            f"{code}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        )
