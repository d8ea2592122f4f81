"""Shared test helpers: paths to the real data and a way to run the CLI as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        raise AssertionError(f"the shared real data is missing at {DATA}")
    return DATA


def run_cli(
    *args: str, check: bool = True, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """Run `llmpipe ...` in a subprocess (the console script of this environment)."""
    exe = Path(sys.executable).with_name("llmpipe")
    proc = subprocess.run(
        [str(exe), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"llmpipe {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc
