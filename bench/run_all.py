"""Run every bench/bench_*.py in turn (each runs its peer on the same data and prints ratios).

Usage: python bench/run_all.py [--quick] [NAME ...]   e.g. `python bench/run_all.py dedup tokenizer`
Each script's output is also saved to bench/results/<name>.txt.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="pass --quick to every benchmark (smaller sizes)")
    args = ap.parse_args()
    scripts = sorted(HERE.glob("bench_*.py"))
    if args.names:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in args.names]
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    failed = []
    for script in scripts:
        cmd = [sys.executable, str(script)] + (["--quick"] if args.quick else [])
        print(f"== {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        print(out, flush=True)
        (results / f"{script.stem.removeprefix('bench_')}.txt").write_text(out)
        print(f"== {script.name}: exit {proc.returncode} in {time.perf_counter() - t0:.1f}s\n", flush=True)
        if proc.returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
