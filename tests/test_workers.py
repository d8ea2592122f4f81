"""Curation on every core of one machine: worker processes and chunks of large inputs give the bytes
of a one-worker, one-part run, a killed chunked run resumes to them, and memory stays flat."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import run_cli, write_crawl_inputs
from llmpipe.curate.pipeline import CHUNK_BYTES, MIN_CHUNK_BYTES, auto_chunk_bytes, plan_parts
from llmpipe.io.fs import as_input

CONFIG = (
    "pack:\n  seq_len: 128\n  samples_per_shard: 300\n  val_fraction: 0.05\n"
    "tokenizer:\n  vocab_size: 400\n  sample_bytes: 2000000\n"
)


def _tree(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path]:
    """A plain JSONL (~2.5 MB) and a Parquet file of many row groups, both from real crawl text, and a WARC."""
    d = tmp_path_factory.mktemp("in")
    write_crawl_inputs(d, data_dir)
    cfg = d.parent / "cfg.yaml"
    cfg.write_text(CONFIG)
    return d, cfg


def _curate(inputs: Path, out: Path, cfg: Path, *extra: str, env: dict[str, str] | None = None) -> int:
    args = ("curate", str(inputs), "--out", str(out), "--config", str(cfg), "--quiet", *extra)
    return run_cli(*args, check=env is None, env=env).returncode


def test_workers_and_chunks_give_the_same_bytes(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    d, cfg = inputs
    _curate(d, tmp_path / "one", cfg, "--workers", "1", "--chunk-mb", "1000")
    ref = _tree(tmp_path / "one")
    stats = json.loads((tmp_path / "one" / "stats.json").read_text())
    assert stats["inputs"]["files"] == 3
    for workers, chunk_mb in (("2", "1000"), ("2", "0.5"), ("1", "0.2"), ("2", "0.07")):
        out = tmp_path / f"w{workers}-c{chunk_mb}"
        p = run_cli(
            "curate",
            str(d),
            "--out",
            str(out),
            "--config",
            str(cfg),
            "--workers",
            workers,
            "--chunk-mb",
            chunk_mb,
        )
        parts = int(p.stdout.split(" in ")[1].split(" part")[0])
        assert parts > 3 or chunk_mb == "1000", p.stdout  # the JSONL and the Parquet were split
        assert _tree(out) == ref, (workers, chunk_mb)


def test_killed_chunked_run_resumes_to_the_same_bytes(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    d, cfg = inputs
    _curate(d, tmp_path / "ref", cfg, "--workers", "1", "--chunk-mb", "1000")
    out = tmp_path / "out"
    # a worker process reaches the point and takes the whole run down with it
    for point in ("segment 0#3 committed", "segment 1#5"):
        code = _curate(d, out, cfg, "--workers", "2", "--chunk-mb", "0.3", env={"LLMPIPE_FAULT_AFTER": point})
        assert code == -9, point
    # the re-run leaves --chunk-mb and --workers to the defaults: it resumes on the killed run's parts
    # (the automatic size would make one part per input here), and the workers' finished parts stay
    marker = next((out / ".llmpipe-work").rglob("*.json*"))
    before = marker.stat().st_mtime_ns
    p = run_cli("curate", str(d), "--out", str(out), "--config", str(cfg), "--workers", "1")
    assert int(p.stdout.split(" in ")[1].split(" part")[0]) > 6, p.stdout
    assert _tree(out) == _tree(tmp_path / "ref")
    assert not marker.exists() or marker.stat().st_mtime_ns == before


def _descendants(pid: int) -> list[int]:
    """Pids of the living processes under ``pid`` (the pool's workers, multiprocessing's helpers)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone
            continue
        if fields[0] != "Z":
            parent[int(stat.parent.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


def test_workers_die_with_a_killed_driver(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    """A SIGKILLed driver takes its workers down (else they wait for work forever, holding the
    run's output pipes open)."""
    d, cfg = inputs
    exe = str(Path(sys.executable).with_name("llmpipe"))
    cmd = [exe, "curate", str(d), "--out", str(tmp_path / "o"), "--config", str(cfg), "--workers", "2"]
    env = {**os.environ, "LLMPIPE_DELAY_AT": "segment 0:60"}  # every worker sleeps in its first part
    p = subprocess.Popen([*cmd, "--chunk-mb", "0.5", "--quiet"], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(_descendants(p.pid)) < 2 and time.monotonic() < deadline:  # 2 workers
            time.sleep(0.2)
        under = _descendants(p.pid)
        assert len(under) >= 2, under
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 10
    alive = under
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [q for q in under if Path(f"/proc/{q}").exists() and "Z" not in _state(q)]
    assert alive == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_automatic_chunks_are_even(inputs: tuple[Path, Path]) -> None:
    """Without --chunk-mb a run aims at 4 parts per worker, and a large input is cut into equal
    chunks: a short last chunk would leave a worker idle at the end of the run."""
    assert auto_chunk_bytes(400_000_000, 2) == 50_000_000
    assert auto_chunk_bytes(10_000_000, 8) == MIN_CHUNK_BYTES
    # past CHUNK_BYTES a part, the parts are a multiple of the workers (1.2 GB on 2: 10, not 9)
    for total, workers in [(1_200_003_935, 2), (10**12, 2), (3 * 10**9, 7), (2 * 10**9, 16)]:
        chunk = auto_chunk_bytes(total, workers)
        parts = -(-total // chunk)
        assert chunk <= CHUNK_BYTES and parts % workers == 0 and parts >= 4 * workers, (total, workers)
    assert -(-1_200_003_935 // auto_chunk_bytes(1_200_003_935, 2)) == 10
    d, _ = inputs
    jsonl, parquet = d / "web.jsonl", d / "web.parquet"
    size = jsonl.stat().st_size
    longest = max(map(len, jsonl.read_bytes().splitlines()))
    parts = plan_parts([as_input(jsonl)], int(size * 0.4))  # before: chunks of 40%, 40% and 20%
    assert [p.chunk for p in parts] == [0, 1, 2]
    assert all(abs(p.size - size / 3) <= longest for p in parts), [p.size for p in parts]
    assert sum(p.size for p in parts) == size
    # Parquet goes by whole row groups, shared out by their uncompressed bytes
    meta = pq.read_metadata(parquet)
    group = [meta.row_group(g).total_byte_size for g in range(meta.num_row_groups)]
    spans = [p.span for p in plan_parts([as_input(parquet)], int(parquet.stat().st_size * 0.4))]
    shares = [sum(group[s.start : s.end]) for s in spans if s is not None]
    assert len(shares) == 3 and all(abs(x - sum(group) / 3) <= max(group) for x in shares), shares


def _peak_rss_mb(cmd: list[str]) -> float:
    """Largest peak RSS of any process of the command (driver and workers), in MB."""
    code = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def test_memory_does_not_grow_with_one_large_input(data_dir: Path, tmp_path: Path) -> None:
    """A 400 MB single JSONL peaks within 100 MB of a 50 MB one: chunks and streaming steps."""
    lines = gzip.decompress(
        (data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes()
    ).splitlines()
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG + "near_dedup:\n  enabled: false\nexact_dedup:\n  enabled: false\n")
    exe = str(Path(sys.executable).with_name("llmpipe"))
    peaks = []
    for mb in (50, 400):
        path = tmp_path / f"in{mb}" / "big.jsonl"
        path.parent.mkdir()
        with open(path, "wb") as f:
            n = 0
            while f.tell() < mb << 20:
                for line in lines:
                    rec = json.loads(line)
                    rec["id"] = f"{n}"
                    f.write(json.dumps(rec).encode() + b"\n")
                    n += 1
        cmd = [exe, "curate", str(path), "--out", str(tmp_path / f"out{mb}"), "--config", str(cfg), "--quiet"]
        peaks.append(_peak_rss_mb([*cmd, "--chunk-mb", "32"]))
    print("peak RSS MB (50 MB, 400 MB input):", peaks)
    assert peaks[1] - peaks[0] < 100, peaks


def test_in_order_hands_on_each_result_once_the_ones_before_it_are_in() -> None:
    """The tokenize -> pack hand-over: input j is packed as soon as inputs 0..j are tokenized, in input
    order, whatever order the workers finish them in."""
    from llmpipe.curate.executors import InOrder, PoolExecutor

    seen: list[int] = []
    after: list[list[int]] = []
    in_order = InOrder(seen.append)
    for j in (2, 0, 4, 1, 3):
        in_order(j, None)
        after.append(list(seen))
    assert after == [[], [0], [0], [0, 1, 2], [0, 1, 2, 3, 4]]
    in_order.finish(6)
    assert seen == [0, 1, 2, 3, 4, 5]
    # through a real pool: the tasks finish out of order (later ones are quicker)
    seen.clear()
    pool = PoolExecutor(2, progress=False)
    try:
        out = pool.map(time.sleep, [(0.3 - 0.05 * j,) for j in range(6)], "sleep", InOrder(seen.append))
    finally:
        pool.close()
    assert out == [None] * 6 and seen == list(range(6))


FORK_SCRIPT = """
import json, sys
import llmpipe.curate.workdir as marked
from llmpipe import _core
from llmpipe.curate.executors import PoolExecutor
from llmpipe.curate.pipeline import run_curate
from llmpipe.curate.settings import CurateConfig

def probe(n):
    # a parallel Rust call (on the worker's thread pool), and what this process inherited
    hashes = _core.content_hashes(["one text", "another text"] * 5000)
    return n, getattr(marked, "MARK", None), len(hashes) == 16 * 10000

def main():
    marked.MARK = "set before the workers started"
    if sys.argv[1] == "pool-made":
        assert _core.claim_thread_pool(2)  # this process's Rust pool exists before the workers start
    pool = PoolExecutor(2, progress=False, fork=True)
    try:
        if sys.argv[1] == "curate":  # the run starts the workers (then they run the probes too)
            run_curate([sys.argv[2]], sys.argv[3], CurateConfig.load(sys.argv[4]), executor=pool,
                       chunk_bytes=500_000, progress=False, log=lambda m: None)
        out = pool.map(probe, [(j,) for j in range(4)], "probe")
    finally:
        pool.close()
    print(json.dumps({"start": pool.start_method, "out": out}))

if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("case", ["fresh", "pool-made", "curate"])
def test_forked_workers_share_the_imports_or_start_spawned(
    case: str, inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    """``PoolExecutor(fork=True)``: workers forked from a process that has not made its Rust thread pool
    see what it imported and set, and run parallel Rust work; from a process whose pool is made (its
    threads would be missing in a child), the pool starts spawned workers instead, which work too. A
    curate run forks its workers (the driver makes no Rust pool before they start)."""
    d, cfg = inputs
    script = tmp_path / "fork_probe.py"
    script.write_text(FORK_SCRIPT)
    args = [sys.executable, str(script), case, str(d), str(tmp_path / "out"), str(cfg)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    forked = case != "pool-made"
    assert got["start"] == ("fork" if forked else "spawn")
    mark = "set before the workers started" if forked else None
    assert got["out"] == [[j, mark, True] for j in range(4)]
    if case == "curate":
        _curate(d, tmp_path / "one", cfg, "--workers", "1", "--chunk-mb", "1000")
        assert _tree(tmp_path / "out") == _tree(tmp_path / "one")
