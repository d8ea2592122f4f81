"""End-to-end curation of text input: llmpipe vs datatrove's LocalPipelineExecutor, same data, same run.

The corpus is real text recombined: paragraphs of the reference books, the Jargon File, the dictionary
and extracted Common Crawl pages (../shared/data), drawn with a seeded generator into documents of 3-40
paragraphs, written as JSONL of the requested sizes, as one file and as many files. Both sides run the
four heuristic filters (Gopher repetition, Gopher quality, C4, FineWeb) and MinHash near dedup (word
5-grams, 14 x 8 bands) with the same number of workers; language ID is off on both (datatrove's needs
a fastText model download), and llmpipe also trains a BPE and packs shards, which datatrove does not.
Each run is a fresh process tree; CPU time and peak RSS are those of the whole tree.

Usage: python bench/bench_curate.py [--sizes 0.1,0.4] [--workers 1,2] [--skip-datatrove]
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

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BIN = Path(sys.executable).parent

LLMPIPE_CONFIG = """
language: {enabled: false}
exact_dedup: {enabled: false}
near_dedup: {enabled: true}
tokenizer: {vocab_size: 8000, sample_bytes: 20000000}
pack: {seq_len: 1024}
"""

DATATROVE = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.pipeline.filters import GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter, FineWebQualityFilter
from datatrove.pipeline.dedup import MinhashDedupSignature, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.utils.hashing import HashConfig

if __name__ == "__main__":  # the worker pool may import this script again
    # "fork": the workers are this process's children, so the CPU they use is in its rusage
    # (under the default forkserver it is not)
    inp, work, workers, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cfg = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14, hashes_per_bucket=8, n_grams=5)
    kw = dict(workers=workers, logging_dir=f"{work}/logs", skip_completed=False, start_method="fork")
    LocalPipelineExecutor([
        JsonlReader(inp),
        GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter(),
        JsonlWriter(f"{work}/kept"),
        MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg),
    ], tasks=tasks, **kw).run()
    LocalPipelineExecutor([MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets", config=cfg)],
                          tasks=cfg.num_buckets, **kw).run()
    LocalPipelineExecutor([MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove", config=cfg)],
                          tasks=1, **kw).run()
    LocalPipelineExecutor([JsonlReader(f"{work}/kept"),
                           MinhashDedupFilter(input_folder=f"{work}/remove"), JsonlWriter(f"{work}/out")],
                          tasks=tasks, **kw).run()
"""


def paragraphs() -> list[str]:
    out: list[str] = []
    for p in sorted((DATA / "reference" / "books").glob("*.txt")):
        out += p.read_text(encoding="utf-8", errors="replace").split("\n\n")
    out += (
        gzip.decompress((DATA / "reference" / "jargon.txt.gz").read_bytes()).decode("latin-1").split("\n\n")
    )
    gcide = gzip.decompress((DATA / "reference" / "gcide.dict.gz").read_bytes())[:20_000_000]
    out += gcide.decode("utf-8", errors="replace").split("\n\n")
    web = gzip.decompress((DATA / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes())
    for line in web.splitlines():
        out += json.loads(line)["text"].split("\n\n")
    return [p.strip() for p in out if len(p.split()) >= 5]


def write_corpus(dest: Path, size: int, files: int, paras: list[str], seed: int = 0) -> None:
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    per = size // files
    n = 0
    for k in range(files):
        with open(dest / f"part-{k:04d}.jsonl", "w", encoding="utf-8") as f:
            while f.tell() < per:
                text = "\n\n".join(rng.choice(paras) for _ in range(rng.randint(3, 40)))
                f.write(json.dumps({"id": str(n), "text": text}) + "\n")
                n += 1


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of a command and everything it starts."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(time.perf_counter() - t, r.ru_utime + r.ru_stime, r.ru_maxrss / 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True, env=env
    ).stdout
    wall, cpu, rss = (float(x) for x in out.split())
    return wall, cpu, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.1,0.4", help="corpus sizes in GB")
    ap.add_argument("--workers", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--skip-datatrove", action="store_true")
    args = ap.parse_args()
    paras = paragraphs()
    tmp = Path(tempfile.mkdtemp(prefix="bench-curate-"))
    cfg = tmp / "cfg.yaml"
    cfg.write_text(LLMPIPE_CONFIG)
    dt_script = tmp / "dt.py"
    dt_script.write_text(DATATROVE)
    cores = os.cpu_count() or 1
    print(
        f"{'size':>6} {'files':>5} {'workers':>7} {'side':>9} {'wall s':>8} {'CPU s':>8} {'MB/CPU-s':>9} {'CPU use':>8} {'peak MB':>8}"
    )
    try:
        for gb in (float(x) for x in args.sizes.split(",")):
            size = int(gb * 1e9)
            for files in (1, 16):
                corpus = tmp / f"in-{gb}-{files}"
                write_corpus(corpus, size, files, paras)
                for w in (int(x) for x in args.workers.split(",")):
                    rows = []
                    out = tmp / "out"
                    shutil.rmtree(out, ignore_errors=True)
                    cmd = [
                        str(BIN / "llmpipe"),
                        "curate",
                        str(corpus),
                        "--out",
                        str(out),
                        "--config",
                        str(cfg),
                    ]
                    rows.append(("llmpipe", *measure([*cmd, "--workers", str(w), "--quiet"])))
                    if not args.skip_datatrove:
                        work = tmp / "dt"
                        shutil.rmtree(work, ignore_errors=True)
                        dcmd = [
                            sys.executable,
                            str(dt_script),
                            str(corpus),
                            str(work),
                            str(w),
                            str(max(w, files)),
                        ]
                        rows.append(("datatrove", *measure(dcmd)))
                    for side, wall, cpu, rss in rows:
                        mb = size / 1e6
                        print(
                            f"{gb:>6} {files:>5} {w:>7} {side:>9} {wall:>8.1f} {cpu:>8.1f} {mb / cpu:>9.2f} "
                            f"{cpu / wall / min(w, cores):>8.0%} {rss:>8.0f}"
                        )
                    if len(rows) == 2:
                        print(
                            f"   llmpipe / datatrove wall-time speed-up: {rows[1][1] / rows[0][1]:.2f}x, "
                            f"per CPU-s: {rows[1][2] / rows[0][2]:.2f}x"
                        )
                shutil.rmtree(corpus)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
