"""Shared test helpers: paths to the real data and a way to run the CLI as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the real data the suite reads (crawls, web pages, reference text): beside the repository, described
#: by its SOURCES.md; never copied into the repository
DATA = (ROOT / ".." / "shared" / "data").resolve()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Without the data directory nothing meaningful runs: stop the session with one line that says so."""
    if not (DATA / "SOURCES.md").is_file():
        raise pytest.UsageError(
            f"the test data directory {DATA} (../shared/data beside the repository, with its SOURCES.md) "
            "is missing: the suite reads real crawl data from it; see README.md, section Tests"
        )


@pytest.fixture(scope="session")
def data_dir() -> Path:
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
