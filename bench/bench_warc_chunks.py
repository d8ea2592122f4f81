"""One large .warc.gz on every core: curate with chunks at gzip members vs one part, and the index pass.

Data: real pages (../shared/data/html/trafilatura-eval, the set written ``--repeat`` times, each copy
with record ids of its own) as a Common-Crawl-style WARC (one gzip member per record, request +
response per page) followed by the real CC/wget WARCs, by ``bench_extract.build_warc``: one input file.

  index pass   ``llmpipe.io.chunks.split`` on the file (inflate every member, follow record lengths)
               vs the peers: Python's gzip module reading the file once, and FastWARC iterating over
               every record header (bodies not parsed)
  curate       the CLI, default config, as a fresh process tree each: --workers 1 on one part (the
               peer), --workers 2 on one part, --workers 2 with --chunk-mb so the file is cut in about
               4 chunks (--chunks); wall time, CPU time of the tree (CPU/wall = cores busy), and a check that all
               three give the same output bytes

Usage: python bench/bench_warc_chunks.py [--quick] [--pages N] [--chunks N]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
_rayon = os.environ.get("RAYON_NUM_THREADS")
from bench_extract import DATA, build_warc  # noqa: E402
from stage_keep import keep_lines, load_stats  # noqa: E402

if _rayon is None:  # bench_extract pins the Rust pools to one thread; here every core is in play
    os.environ.pop("RAYON_NUM_THREADS", None)


def _best(n: int, fn: object) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best, out


def _tree(out: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(out.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def _curate(src: Path, out: Path, workers: int, chunk_mb: float) -> tuple[float, float, str, str]:
    """(wall s, CPU s of the process tree, output digest, the CLI's first line)."""
    exe = str(Path(sys.executable).with_name("llmpipe"))
    cmd = [exe, "curate", str(src), "--out", str(out), "--workers", str(workers), "--chunk-mb", str(chunk_mb)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"curate failed: {p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, _tree(out), p.stdout.splitlines()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="150 pages")
    ap.add_argument("--pages", type=int, default=884, help="pages of the evaluation set to write (max 884)")
    ap.add_argument("--repeat", type=int, default=4, help="write the pages this many times (own record ids)")
    ap.add_argument("--chunks", type=int, default=4, help="cut the file into about this many chunks")
    args = ap.parse_args()
    from fastwarc.warc import ArchiveIterator, WarcRecordType
    from llmpipe.io.chunks import split

    pages = sorted((DATA / "html" / "trafilatura-eval").glob("*.html"))[: 150 if args.quick else args.pages]
    pages *= 1 if args.quick else args.repeat  # each copy is a record of its own id
    tmp = Path(tempfile.mkdtemp(prefix="bench_warc_chunks_"))
    try:
        warc = tmp / "in" / "crawl.warc.gz"
        warc.parent.mkdir()
        raw = build_warc(pages, warc)
        size = warc.stat().st_size
        print(f"input: one file, {len(pages)} pages (the set x {1 if args.quick else args.repeat}) + the real CC/wget WARCs: {size / 1e6:.1f} MB gzip, "
              f"{raw / 1e6:.1f} MB raw WARC, one gzip member per record")  # fmt: skip
        chunk_mb = round(size / args.chunks / 1e6, 3)

        def read_gzip() -> int:
            n = 0
            with gzip.open(warc, "rb") as f:
                while block := f.read(1 << 20):
                    n += len(block)
            return n

        def fastwarc_headers() -> int:
            with open(warc, "rb") as f:
                return sum(
                    1 for _ in ArchiveIterator(f, record_types=WarcRecordType.any_type, parse_http=False)
                )

        t_index, spans = _best(3, lambda: split(warc, "warc", int(chunk_mb * 1e6)))
        t_gzip, _ = _best(3, read_gzip)
        t_fw, records = _best(3, fastwarc_headers)
        print(f"index pass: {len(spans)} chunks of ~{chunk_mb} MB over {records} records in {t_index:.2f} s "  # type: ignore[arg-type]
              f"({raw / 1e6 / t_index:.0f} MB raw/s); gzip module reads the file in {t_gzip:.2f} s "
              f"(ratio {t_gzip / t_index:.2f}x), FastWARC iterates its records in {t_fw:.2f} s "
              f"(ratio {t_fw / t_index:.2f}x)")  # fmt: skip

        runs = {}
        outs = []
        for name, workers, mb in (("1 worker, 1 part", 1, 100000), ("2 workers, 1 part", 2, 100000),
                                  (f"2 workers, {len(spans)} chunks", 2, chunk_mb)):  # type: ignore[arg-type]  # fmt: skip
            outs.append(tmp / f"out-{workers}-{mb}")
            wall, cpu, digest, line = _curate(warc.parent, outs[-1], workers, mb)
            runs[name] = (wall, cpu, digest)
            print(f"curate {name}: {wall:.1f} s wall, {cpu:.1f} s CPU, {cpu / wall:.2f} cores busy  [{line}]")
        base = runs["1 worker, 1 part"][0]
        for name, (wall, _, _) in runs.items():
            print(f"ratio vs 1 worker: {name}: {base / wall:.2f}x")
        print("what each stage saw and kept (the same in the three runs):")
        print("\n".join(keep_lines(load_stats(outs[0]))))
        same = len({d for _, _, d in runs.values()}) == 1
        print(f"output bytes identical across the three runs: {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
