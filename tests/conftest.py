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


#: modules that start Ray clusters: `make test` runs them one after another on one xdist worker, since two
#: clusters starting at once on a 2-core machine can miss Ray's start-up deadlines
RAY_CLUSTER_MODULES = {"test_ray.py", "test_sweep.py", "test_ray_launcher.py"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `pytest -n N --dist loadgroup` (make test) a test file is one unit of work, so its module
    fixtures are built once, and the Ray modules share one unit."""
    for item in items:
        group = "ray-clusters" if item.path.name in RAY_CLUSTER_MODULES else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))


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


def write_crawl_inputs(d: Path, data_dir: Path, parquet: str = "web.parquet") -> None:
    """Real crawl text in three formats under ``d``: a plain JSONL (~2.5 MB) with bad lines between good
    ones, a Parquet file of many row groups (no ids: positions make them) at ``parquet``, and a gzip WARC."""
    import gzip
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = gzip.decompress(
        (data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes()
    ).splitlines()
    with open(d / "web.jsonl", "wb") as f:
        for i, line in enumerate(lines):
            f.write(line + b"\n")
            if i % 50 == 0:
                f.write(b"\n{not json\n")  # bad lines between good ones: positions must not shift
    rows = [json.loads(x) for x in lines[:400]]
    (d / parquet).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": [r["text"] for r in rows]}), d / parquet, row_group_size=25)
    (d / "crawl.warc.gz").write_bytes((data_dir / "web" / "wget-crawl-0000.warc.gz").read_bytes())
