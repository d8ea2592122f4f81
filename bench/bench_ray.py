"""Curate throughput: local executor vs a Ray cluster of 1 node and of 2 nodes, on this machine.

    python bench/bench_ray.py [--quick]

Starts its own Ray head (1 CPU) in a private temp dir, runs `llmpipe curate --ray` against it, adds a
second 1-CPU node and runs again; every run gets the same inputs and config and must write the same
bytes. Prints wall seconds, input MB/s and the ratios. On a 2-core machine shared with other work the
numbers are noisy, and the driver-side steps (tokenizer training, packing) do not scale with nodes:
read the ratio as an upper-bound sketch, not a cluster measurement. Kills what it started by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stage_keep import keep_lines, load_stats

BIN = Path(sys.executable).parent
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "web"
QUICK = ["cc-en-head-0091.jsonl", "cc-main-2019-30-extracted.jsonl.gz", "cc-main-2020-34-excerpt.warc.gz"]
FULL = [
    *QUICK,
    "cc-en-head-0174.jsonl",
    "cc-main-2023-06-sample.jsonl.gz",
    "wget-crawl-0000.warc.gz",
    "wget-crawl-0001.warc.gz",
    "cc-2008-sample.arc",
    "cc-2009-sample.arc",
]
CONFIG = "pack:\n  seq_len: 128\n  val_fraction: 0.1\ntokenizer:\n  vocab_size: 300\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _owned(temp_dir: Path, port: int) -> set[int]:
    procs: dict[int, tuple[int, str]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            procs[int(d.name)] = (ppid, cmd)
    ours = {p for p, (_, c) in procs.items() if str(temp_dir) in c or re.search(rf":{port}\b", c)}
    ours.discard(os.getpid())
    while more := {p for p, (pp, _) in procs.items() if pp in ours and p not in ours}:
        ours |= more
    return ours


def _kill(pids: set[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
        time.sleep(2)


def _run(cmd: list[str], env: dict[str, str]) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def _curate(inputs: list[Path], out: Path, cfg: Path, env: dict[str, str], *extra: str) -> float:
    cmd = [str(BIN / "llmpipe"), "curate", *map(str, inputs), "--out", str(out), "--config", str(cfg)]
    t = time.perf_counter()
    _run([*cmd, "--quiet", *extra], env)
    return time.perf_counter() - t


def _same(a: Path, b: Path) -> bool:
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return fa == fb and all((a / n).read_bytes() == (b / n).read_bytes() for n in fa)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 inputs instead of 9")
    args = ap.parse_args()
    inputs = [DATA / n for n in (QUICK if args.quick else FULL)]
    mb = sum(p.stat().st_size for p in inputs) / 1e6
    work = Path(tempfile.mkdtemp(prefix="bray", dir="/tmp"))
    cfg = work / "config.yaml"
    cfg.write_text(CONFIG)
    temp_dir, port = work / "r", _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
    node = ["--num-cpus", "1", "--memory", "1500000000", "--object-store-memory", "150000000"]
    try:
        local = _curate(inputs, work / "local", cfg, env | {"RAYON_NUM_THREADS": "1"})
        head = [str(BIN / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
        head += ["--include-dashboard", "false", "--ray-client-server-port", str(_free_port())]
        _run([*head, "--temp-dir", str(temp_dir), *node], env)
        address = f"127.0.0.1:{port}"
        one = _curate(inputs, work / "ray1", cfg, env, "--ray", address)
        worker = [str(BIN / "ray"), "start", "--address", address, "--node-ip-address", "127.0.0.1", *node]
        _run(worker, env)
        time.sleep(5)  # let the second node register
        two = _curate(inputs, work / "ray2", cfg, env, "--ray", address)
    finally:
        _kill(_owned(temp_dir, port))
    same = _same(work / "local", work / "ray1") and _same(work / "local", work / "ray2")
    print(f"inputs: {len(inputs)} files, {mb:.1f} MB; outputs byte-identical: {same}")
    for name, s in (
        ("local, 1 rayon thread", local),
        ("ray, 1 node x 1 CPU", one),
        ("ray, 2 nodes x 1 CPU", two),
    ):
        print(f"{name:24s} {s:7.1f} s  {mb / s:6.2f} MB/s")
    print(f"ratio 2 nodes / 1 node throughput: {one / two:.2f}x  (ray 1 node / local: {local / one:.2f}x)")
    print("what each stage saw and kept (the same in the three runs):")
    print("\n".join(keep_lines(load_stats(work / "local"))))
    subprocess.run(["rm", "-rf", str(work)], check=False)
    if not same:
        sys.exit("outputs differ between executors")


if __name__ == "__main__":
    main()
