"""End-to-end curation of text input: llmpipe vs datatrove's LocalPipelineExecutor, same data, same run.

The corpus is real text recombined: paragraphs of the reference books, the Jargon File, the dictionary
and extracted Common Crawl pages (../shared/data), drawn with a seeded generator into documents of 3-40
paragraphs, written as JSONL of the requested sizes, as one file and as many files. Both sides run the
four heuristic filters (Gopher repetition, Gopher quality, C4, FineWeb) and MinHash near dedup (word
5-grams, 14 x 8 bands) with the same number of workers; language ID is off on both (datatrove's needs
a fastText model download), and llmpipe also trains a BPE and packs shards, which datatrove does not.
Each run is a fresh process tree; CPU time and peak RSS are those of the whole tree.

Corpus mode (``--corpus mixed``): documents from many real sources of ../shared/data, each document
drawn from one source (Common Crawl extracts, ABC news, State of the Union and inaugural speeches, movie
reviews, web forum text, UDHR paragraphs in ~280 languages, Genesis in 8 languages, Wikipedia articles,
the Python docs' reStructuredText, books in English and French, the Jargon File, GCIDE), and ~15% of
the documents planted near-duplicates (an earlier document with 2-10% of its words edited). llmpipe runs
the **default** config (every default stage: language ID, the four filters, exact and near dedup, PII,
BPE training, tokenize, pack); datatrove runs the same four filters and MinHash as above (no language
ID, no exact dedup, no PII, no tokenizer). It prints, per run, the keep rate of every stage (stats.json)
and the peak RSS of the largest process and of the whole process tree (sampled every 50 ms).

Usage: python bench/bench_curate.py [--sizes 0.1,0.4] [--workers 1,2] [--skip-datatrove]
       python bench/bench_curate.py --corpus mixed --sizes 0.1,0.4,1.2 --workers 2 [--files 1,16]
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import html
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
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


def _zip_texts(name: str, keep: Callable[[str], bool] = lambda n: True) -> list[tuple[str, str]]:
    out = []
    with zipfile.ZipFile(DATA / "reference" / "nltk" / name) as z:
        for n in sorted(z.namelist()):
            if n.endswith("/") or n.endswith("README") or not keep(n):
                continue
            enc = "utf-8" if n.endswith("UTF8") else "latin-1"
            out.append((n, z.read(n).decode(enc, errors="replace").replace("\r\n", "\n")))
    return out


def _paras(text: str, sep: str = "\n\n", min_words: int = 3) -> list[str]:
    """Paragraphs (or lines) of at least ``min_words`` words and at most 8,000 characters."""
    return [p.strip() for p in text.split(sep) if len(p.split()) >= min_words and len(p) <= 8000]


_WIKI_DROP = re.compile(
    r"\{\{[^{}]*\}\}|<ref[^>]*/>|<ref[^>]*>.*?</ref>|<[^>]+>|\[\[(?:File|Image|Category):[^\]]*\]\]", re.S
)
_WIKI_LINK = re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]")


def _wiki() -> list[str]:
    """Paragraphs of the Wikipedia articles, templates, references and markup removed."""
    xml = bz2.decompress((DATA / "reference" / "enwiki-2016-excerpt.xml.bz2").read_bytes()).decode()
    out = []
    for body in re.findall(r"<text[^>]*>(.*?)</text>", xml, flags=re.S):
        body = html.unescape(body)
        for _ in range(3):  # nested templates
            body = _WIKI_DROP.sub("", body)
        body = _WIKI_LINK.sub(r"\1", body).replace("'''", "").replace("''", "")
        out += [p for p in _paras(body, min_words=8) if not p.startswith(("{", "|", "!", "*", "=", "#", ":"))]
    return out


Source = tuple[float, int, int, str, list[list[str]]]


def sources() -> dict[str, Source]:
    """name -> (weight, min units, max units, joiner, pools): a document takes one pool of its source
    (one language of UDHR and Genesis, one book; the others have one pool) and draws units from it."""
    web: list[str] = []
    for name in ("cc-main-2019-30-extracted.jsonl.gz", "cc-main-2023-06-sample.jsonl.gz"):
        for line in gzip.decompress((DATA / "web" / name).read_bytes()).splitlines():
            web += _paras(json.loads(line)["text"], min_words=5)
    for name in ("cc-en-head-0091.jsonl", "cc-en-head-0174.jsonl"):
        for line in (DATA / "web" / name).read_text(encoding="utf-8").splitlines():
            web += _paras(json.loads(line)["text"], "\n", 5)
    lines = {
        z: [p for _, t in _zip_texts(z) for p in _paras(t, "\n", 5)] for z in ("abc.zip", "movie_reviews.zip")
    }
    speeches = [
        p for z in ("state_union.zip", "inaugural.zip") for _, t in _zip_texts(z) for p in _paras(t, "\n", 5)
    ]
    forum = [p for _, t in _zip_texts("webtext.zip") for p in _paras(t, "\n", 3)]
    udhr = [_paras(t, "\n") for _, t in _zip_texts("udhr.zip", lambda n: n.endswith(("UTF8", "Latin1")))]
    genesis = [_paras(t, "\n", 5) for _, t in _zip_texts("genesis.zip")]
    rst: list[str] = []
    with tarfile.open(DATA / "reference" / "python-3.11-docs.rst.tar.gz") as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            f = tar.extractfile(m) if m.isfile() else None
            if f is not None:
                rst += _paras(f.read().decode("utf-8", errors="replace"), min_words=5)
    books = [
        _paras(p.read_text(encoding="utf-8", errors="replace"))
        for p in sorted((DATA / "reference" / "books").glob("*.txt"))
    ]
    jargon = _paras(gzip.decompress((DATA / "reference" / "jargon.txt.gz").read_bytes()).decode("latin-1"))
    gcide = gzip.decompress((DATA / "reference" / "gcide.dict.gz").read_bytes())[:20_000_000]
    table: dict[str, Source] = {
        "web": (0.22, 3, 30, "\n\n", [web]),
        "news": (0.12, 5, 30, "\n", [lines["abc.zip"]]),
        "speeches": (0.08, 3, 25, "\n\n", [speeches]),
        "reviews": (0.08, 8, 35, "\n", [lines["movie_reviews.zip"]]),
        "forum": (0.04, 5, 40, "\n", [forum]),
        "udhr": (0.10, 3, 20, "\n\n", udhr),
        "genesis": (0.03, 5, 30, "\n", genesis),
        "wiki": (0.12, 3, 25, "\n\n", [_wiki()]),
        "python-docs": (0.07, 3, 30, "\n\n", [rst]),
        "books": (0.06, 3, 30, "\n\n", books),
        "jargon": (0.04, 3, 20, "\n\n", [jargon]),
        "gcide": (0.04, 3, 20, "\n\n", [_paras(gcide.decode("utf-8", errors="replace"))]),
    }
    return {
        k: (w, lo, hi, j, [p for p in pools if len(p) >= 3]) for k, (w, lo, hi, j, pools) in table.items()
    }


def _edit(text: str, rng: random.Random, words: list[str]) -> str:
    """A near-duplicate: 2-10% of the words replaced, deleted or followed by an inserted one."""
    rate = rng.uniform(0.02, 0.10)
    out = []
    for line in text.split("\n"):
        new: list[str] = []
        for t in line.split(" "):
            r = rng.random()
            if r >= rate:
                new.append(t)
            elif r < rate / 3:
                new.append(rng.choice(words))
            elif r < 2 * rate / 3:
                new += [t, rng.choice(words)]
        out.append(" ".join(new))
    return "\n".join(out)


def write_mixed_corpus(
    dest: Path, size: int, files: int, srcs: dict[str, Source], dup_rate: float = 0.15, seed: int = 0
) -> dict[str, int]:
    """``size`` bytes of JSONL in ``files`` files, ``dup_rate`` of the documents edited copies of
    earlier ones; returns the documents per source and the planted copies."""
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    names = list(srcs)
    weights = [srcs[n][0] for n in names]
    words = [w for p in srcs["news"][4][0][:5000] for w in p.split()]
    recent: list[str] = []  # originals a planted copy may come from
    counts = dict.fromkeys([*names, "planted"], 0)
    per = size // files
    n = 0
    for k in range(files):
        with open(dest / f"part-{k:04d}.jsonl", "w", encoding="utf-8") as f:
            while f.tell() < per:
                if recent and rng.random() < dup_rate:
                    text = _edit(rng.choice(recent), rng, words)
                    counts["planted"] += 1
                else:
                    name = rng.choices(names, weights)[0]
                    _, lo, hi, joiner, pools = srcs[name]
                    pool = rng.choice(pools)
                    text = joiner.join(rng.choice(pool) for _ in range(rng.randint(lo, hi)))
                    counts[name] += 1
                    if len(recent) < 20_000:
                        recent.append(text)
                    else:
                        recent[rng.randrange(len(recent))] = text
                f.write(json.dumps({"id": str(n), "text": text}, ensure_ascii=False) + "\n")
                n += 1
    return counts


def split_corpus(src: Path, dest: Path, files: int) -> None:
    """The lines of ``src`` in ``files`` files of about equal size, in order."""
    dest.mkdir(parents=True)
    per = src.stat().st_size // files
    with open(src, "rb") as f:
        for k in range(files):
            with open(dest / f"part-{k:04d}.jsonl", "wb") as out:
                while out.tell() < per or k == files - 1:
                    line = f.readline()
                    if not line:
                        break
                    out.write(line)


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


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _status_kb(pid: int, keys: tuple[str, ...]) -> dict[str, int]:
    got = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in keys:
                    got[k] = int(line.split()[1])
    except OSError:
        pass
    return got


@dataclass
class TreeRun:
    wall: float
    cpu: float  # CPU seconds of the whole process tree (user + system)
    largest_mb: float  # peak RSS of the largest process (the kernel's high-water mark)
    driver_mb: float  # peak RSS of the command's own process
    tree_mb: float  # peak of the sum of the tree's RSS, sampled every 50 ms


def measure_tree(cmd: list[str]) -> TreeRun:
    """Run ``cmd``; its wall time, the CPU time of it and every process it starts, and peak RSS of
    the largest process, of ``cmd``'s own process and of the tree (sum of RSS) while it runs.

    ``cmd`` runs under a fresh Python process that reports its children's high-water mark
    (``RUSAGE_CHILDREN``): this process's own would include every earlier run."""
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    hwm: dict[int, int] = {}
    tree_kb = 0
    driver = None
    while proc.poll() is None:
        total = 0
        for pid in _tree(proc.pid)[1:]:  # the wrapper itself is not counted
            driver = driver or pid  # the wrapper's first child: ``cmd``
            s = _status_kb(pid, ("VmRSS", "VmHWM"))
            total += s.get("VmRSS", 0)
            hwm[pid] = max(hwm.get(pid, 0), s.get("VmHWM", 0))
        tree_kb = max(tree_kb, total)
        time.sleep(0.05)
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.wait() != 0:
        raise RuntimeError(f"{cmd[0]} failed:\n{err[-2000:]}")
    wall = time.perf_counter() - t
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r.ru_utime + r.ru_stime) - (before.ru_utime + before.ru_stime)
    largest = max(int(out.split()[-1]), max(hwm.values(), default=0))
    driver_kb = hwm.get(driver, 0) if driver is not None else 0
    return TreeRun(wall, cpu, largest / 1024, driver_kb / 1024, tree_kb / 1024)


def _keep_rates(stats_file: Path) -> str:
    """Each stage's documents out / in, from stats.json (the stages that drop something)."""
    stats = json.loads(stats_file.read_text())
    rates = [
        f"{s['name']} {s['docs_out'] / s['docs_in']:.1%}"
        for s in stats["stages"]
        if s["docs_in"] and s["docs_out"] != s["docs_in"]
    ]
    r = stats["retention"]
    return f"kept {r['docs_out']:,} of {r['docs_in']:,} documents ({r['doc_fraction']:.1%}): " + ", ".join(
        rates
    )


def main_mixed(args: argparse.Namespace) -> None:
    """Corpus mode: the mixed corpus, llmpipe with the default config (or ``--config``)."""
    config = Path(args.config or ROOT / "configs" / "curate" / "default.yaml")
    srcs = sources()
    tmp = Path(tempfile.mkdtemp(prefix="bench-curate-", dir=args.tmp))
    dt_script = tmp / "dt.py"
    dt_script.write_text(DATATROVE)
    cores = os.cpu_count() or 1
    head = f"{'size':>6} {'files':>5} {'workers':>7} {'side':>9} {'wall s':>7} {'CPU s':>7} {'MB/CPU-s':>8} "
    print(head + f"{'cores':>6} {'largest MB':>10} {'driver MB':>9} {'tree MB':>8}", flush=True)
    try:
        for gb in (float(x) for x in args.sizes.split(",")):
            size = int(gb * 1e9)
            for files in (int(x) for x in args.files.split(",")):
                # --keep-corpus: corpora stay in --tmp (or the temp dir) and are reused by the next run
                corpus = (
                    Path(args.tmp or tempfile.gettempdir()) if args.keep_corpus else tmp
                ) / f"in-{gb}-{files}"
                one = corpus.with_name(f"in-{gb}-1") / "part-0000.jsonl"
                if not corpus.exists() and files > 1 and one.exists():
                    split_corpus(one, corpus, files)  # the same documents as the one file
                elif not corpus.exists():
                    made = write_mixed_corpus(corpus, size, files, srcs)
                    print(f"corpus {gb} GB, {files} file(s): documents per source {made}", flush=True)
                for w in (int(x) for x in args.workers.split(",")):
                    out = tmp / "out"
                    shutil.rmtree(out, ignore_errors=True)
                    cmd = [str(BIN / "llmpipe"), "curate", str(corpus), "--out", str(out)]
                    cmd += ["--config", str(config), "--workers", str(w), "--quiet"]
                    rows = [("llmpipe", measure_tree(cmd))]
                    rates = _keep_rates(out / "stats.json")
                    if not args.skip_datatrove and gb <= args.datatrove_max_gb:
                        dcmd = _datatrove_cmd(dt_script, corpus, tmp / "dt", w, files)
                        rows.append(("datatrove", measure_tree(dcmd)))
                        shutil.rmtree(tmp / "dt", ignore_errors=True)
                    for side, m in rows:
                        print(
                            f"{gb:>6} {files:>5} {w:>7} {side:>9} {m.wall:>7.1f} {m.cpu:>7.1f} "
                            f"{size / 1e6 / m.cpu:>8.2f} {m.cpu / m.wall / min(w, cores):>6.0%} "
                            f"{m.largest_mb:>10.0f} {m.driver_mb:>9.0f} {m.tree_mb:>8.0f}",
                            flush=True,
                        )
                    print(f"   llmpipe {rates}", flush=True)
                    if len(rows) == 2:
                        a, b = rows[0][1], rows[1][1]
                        print(
                            f"   llmpipe / datatrove per CPU-s: {b.cpu / a.cpu:.1f}x, wall: {b.wall / a.wall:.1f}x",
                            flush=True,
                        )
                    shutil.rmtree(out, ignore_errors=True)
                if args.keep_corpus:
                    print(f"   corpus kept in {corpus}", flush=True)
                else:
                    shutil.rmtree(corpus)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _datatrove_cmd(script: Path, corpus: Path, work: Path, workers: int, files: int) -> list[str]:
    """The datatrove runner's command line on ``corpus``, in a fresh ``work`` directory."""
    shutil.rmtree(work, ignore_errors=True)
    return [sys.executable, str(script), str(corpus), str(work), str(workers), str(max(workers, files))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.1,0.4", help="corpus sizes in GB")
    ap.add_argument("--workers", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument(
        "--corpus",
        choices=("recombined", "mixed"),
        default="recombined",
        help="recombined: paragraphs of a few sources, the filters' config; mixed: many sources, "
        "15%% planted near-duplicates, the default config",
    )
    ap.add_argument("--files", default="1,16", help="mixed: the corpus as one file and as N files")
    ap.add_argument(
        "--config", default=None, help="mixed: the llmpipe config (default: configs/curate/default.yaml)"
    )
    ap.add_argument(
        "--datatrove-max-gb", type=float, default=0.1, help="mixed: run datatrove up to this size"
    )
    ap.add_argument(
        "--tmp", default=None, help="where the corpora are written (default: the system's temp dir)"
    )
    ap.add_argument(
        "--keep-corpus",
        action="store_true",
        help="mixed: leave the corpora in --tmp as in-<GB>-<files> (for profiling); a later run reuses them",
    )
    args = ap.parse_args()
    if args.corpus == "mixed":
        return main_mixed(args)
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
                        dcmd = _datatrove_cmd(dt_script, corpus, tmp / "dt", w, files)
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
