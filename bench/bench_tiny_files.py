"""Per-file overhead of many tiny inputs: llmpipe curate vs datatrove's LocalPipelineExecutor.

N tiny JSONL files (default 2000), each holding one or two documents of a few real paragraphs drawn
with a seeded generator from extracted Common Crawl pages and reference books (../shared/data).
Both sides read the files, run the four heuristic filters (Gopher repetition, Gopher quality, C4,
FineWeb) and write what they keep; language ID and dedup are off on both (datatrove's language ID
needs a model download). llmpipe also trains a small BPE, tokenizes and packs shards, which datatrove
does not. Each side runs as a fresh process with 1 worker and with every core; the table gives wall
and CPU time (of the whole process tree) per input file and the ratio. With one worker llmpipe also
runs configs/curate/sample.yaml (language ID, exact and near dedup, PII on: more steps per input).

Usage: python bench/bench_tiny_files.py [--files 2000] [--workers 1,2] [--skip-datatrove]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from stage_keep import keep_lines, load_stats

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BIN = Path(sys.executable).parent
SAMPLE = ROOT / "configs" / "curate" / "sample.yaml"  # every quality stage, dedup and PII on

LLMPIPE_CONFIG = """
language: {enabled: false}
exact_dedup: {enabled: false}
near_dedup: {enabled: false}
pii: {enabled: false}
tokenizer: {vocab_size: 512, min_frequency: 2}
pack: {seq_len: 64, samples_per_shard: 4096}
"""

# datatrove's JsonlReader/JsonlWriter need orjson, which is not installed here: these are the same
# blocks on datatrove's own base classes (file listing, sharding over tasks, output managers), with
# the standard library's json in place of orjson (a few KB per file: parsing is not what this measures).
DATATROVE = """
import json, sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers.base import BaseDiskReader
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.pipeline.filters import GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter, FineWebQualityFilter


class Reader(BaseDiskReader):
    name = "jsonl (stdlib json)"

    def read_file(self, filepath):
        with self.data_folder.open(filepath, "r") as f:
            for li, line in enumerate(f):
                with self.track_time():
                    document = self.get_document_from_dict(json.loads(line), filepath, li)
                if document:
                    yield document


class Writer(DiskWriter):
    default_output_filename = "${rank}.jsonl.gz"
    name = "jsonl (stdlib json)"

    def __init__(self, folder):
        super().__init__(folder, compression="gzip", mode="wt")

    def _write(self, document, file_handler, _filename):
        file_handler.write(json.dumps(document) + "\\n")


if __name__ == "__main__":  # datatrove's worker pool (forkserver) imports this module again
    inp, work, workers, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    LocalPipelineExecutor([
        Reader(inp, glob_pattern="**/*.jsonl"),
        GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter(),
        Writer(f"{work}/kept"),
    ], tasks=tasks, workers=workers, logging_dir=f"{work}/logs", skip_completed=False).run()
"""


def paragraphs() -> list[str]:
    out: list[str] = []
    for p in sorted((DATA / "reference" / "books").glob("*.txt")):
        out += p.read_text(encoding="utf-8", errors="replace").split("\n\n")
    web = gzip.decompress((DATA / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes())
    for line in web.splitlines():
        out += json.loads(line)["text"].split("\n\n")
    return [p.strip() for p in out if len(p.split()) >= 8]


def write_files(dest: Path, n: int, paras: list[str], seed: int = 0) -> int:
    """``n`` tiny JSONL files of one or two documents of 3-8 paragraphs; returns the total bytes."""
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    total = doc = 0
    for k in range(n):
        lines = []
        for _ in range(rng.randint(1, 2)):
            text = "\n\n".join(rng.choice(paras) for _ in range(rng.randint(3, 8)))
            lines.append(json.dumps({"id": f"d{doc}", "text": text}) + "\n")
            doc += 1
        data = "".join(lines).encode()
        (dest / f"{k // 100:03d}" / f"tiny-{k:05d}.jsonl").parent.mkdir(exist_ok=True)
        (dest / f"{k // 100:03d}" / f"tiny-{k:05d}.jsonl").write_bytes(data)
        total += len(data)
    return total


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of a command and every process it starts."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(time.perf_counter() - t, r.ru_utime + r.ru_stime)"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True)
    wall, cpu = (float(x) for x in out.stdout.split())
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--workers", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--skip-datatrove", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-tiny-"))
    try:
        corpus = tmp / "in"
        size = write_files(corpus, args.files, paragraphs())
        cfg = tmp / "cfg.yaml"
        cfg.write_text(LLMPIPE_CONFIG)
        dt = tmp / "dt.py"
        dt.write_text(DATATROVE)
        print(f"{args.files} files, {size / 1e6:.2f} MB ({size // args.files} bytes per file)")
        print(
            f"{'workers':>7} {'side':>20} {'wall s':>7} {'CPU s':>7} {'wall ms/file':>12} {'CPU ms/file':>11}"
        )

        def row(w: int, side: str, wall: float, cpu: float | None) -> None:
            n = args.files
            cpu_s, cpu_ms = (f"{cpu:.1f}", f"{1e3 * cpu / n:.2f}") if cpu is not None else ("-", "-")
            print(f"{w:>7} {side:>20} {wall:>7.1f} {cpu_s:>7} {1e3 * wall / n:>12.2f} {cpu_ms:>11}")

        keeps: dict[str, list[str]] = {}  # what each stage saw and kept, by config (the same for any workers)
        for w in (int(x) for x in args.workers.split(",")):
            out = tmp / "out"
            runs = {"llmpipe": cfg, "llmpipe (sample.yaml)": SAMPLE} if w == 1 else {"llmpipe": cfg}
            res = {}
            for side, c in runs.items():
                shutil.rmtree(out, ignore_errors=True)
                cmd = [str(BIN / "llmpipe"), "curate", str(corpus), "--out", str(out), "--config", str(c)]
                res[side] = measure([*cmd, "--workers", str(w), "--quiet"])
                row(w, side, *res[side])
                keeps.setdefault(side, keep_lines(load_stats(out), indent="     "))
            if args.skip_datatrove:
                continue
            work = tmp / "dt"
            shutil.rmtree(work, ignore_errors=True)
            peer = measure([sys.executable, str(dt), str(corpus), str(work), str(w), str(w)])
            # datatrove's pool of several workers runs under a forkserver whose children the
            # rusage of this process tree does not reach: its CPU time is known with one worker only
            row(w, "datatrove", peer[0], peer[1] if w == 1 else None)
            kept = 0
            for f in (work / "kept").glob("*.jsonl.gz"):
                with gzip.open(f, "rt", encoding="utf-8") as fh:
                    kept += sum(1 for _ in fh)
            keeps.setdefault("datatrove", [f"     kept {kept:,} documents after the four filters"])
            ours = res["llmpipe"]
            cpu = f", CPU {peer[1] / ours[1]:.2f}x" if w == 1 else ""
            print(f"   llmpipe speed-up over datatrove per file: wall {peer[0] / ours[0]:.2f}x{cpu}")
        for side, lines in keeps.items():
            print(f"   {side}: what each stage saw and kept")
            print("\n".join(lines))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
