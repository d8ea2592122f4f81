"""The suite's own set-up: a missing data directory stops it with one line, before any test runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_missing_data_directory_fails_the_session_with_one_line(tmp_path: Path) -> None:
    repo = tmp_path / "repo"  # a copy of the suite's conftest in a repository without ../shared/data
    (repo / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "conftest.py", repo / "tests" / "conftest.py")
    (repo / "tests" / "test_any.py").write_text("def test_any():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    out = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(out) == 1, out
    assert str((tmp_path / "shared" / "data").resolve()) in out[0] and "missing" in out[0]
    assert "1 passed" not in proc.stdout
