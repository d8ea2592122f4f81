"""Near dedup benchmark: llmpipe vs datasketch, same documents, same parameters, same run.

1. Signature throughput per core (word 5-grams, 112 hashes, seed 1) on real documents (nltk
   movie_reviews + the CC-MAIN-2019-30 extract): llmpipe with RAYON_NUM_THREADS=1 vs datasketch
   MinHash.update_batch (plus the Python shingling a datasketch user has to write).
2. Full near dedup (signatures + LSH + verification + union-find + drops) of N synthetic documents
   made by sampling real sentences, with 10% planted near duplicates, through the near_dedup stage's
   disk phases (prepare per 10k batch -> key files -> resolve), in a child process whose peak RSS is
   reported. The peer: datasketch MinHash + MinHashLSH (insert + query) on a sample, docs/s ratio.
3. Recall on planted near duplicates, llmpipe beside datatrove on the same corpus in the same run: real
   documents (nltk movie reviews, the CC-MAIN-2019-30 extract, the Python docs' reStructuredText; exact
   duplicates and texts under 50 words left out), of which ``--recall-bases`` get 1-3 edited copies each
   (word substitutions, deletions and insertions at 0.5-10% of the words, added boilerplate, reordered
   paragraphs: tests/dedup_corpus.py's KINDS in turn), the copies after all the originals. Both run
   MinHash with word 5-grams and 14 x 8 bands (llmpipe: its near_dedup stage, defaults; datatrove 0.9:
   MinhashDedupSignature/Buckets/Cluster/Filter, 64-bit hashes). Reported for each: planted copies
   removed (of the copies, per group at most its number of copies), groups that keep more than one
   document, groups removed entirely, removals outside the planted groups, and recall per edit.

Usage: python bench/bench_dedup.py [--quick] [--recall-only] [--recall-bases N]
       (--quick: 100k documents instead of 1M; --recall-only: section 3 alone)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "tests"))


def real_docs() -> list[str]:
    from dedup_corpus import movie_reviews

    docs = movie_reviews(DATA, 2000)
    with gzip.open(DATA / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        docs += [t for t in (json.loads(line)["text"] for line in f) if t.strip()]
    return docs


def datasketch_signature(text: str, num_perm: int = 112):  # noqa: ANN201
    import datasketch
    from dedup_corpus import shingle_set

    m = datasketch.MinHash(num_perm=num_perm, seed=1)
    m.update_batch([s.encode() for s in shingle_set(text)])
    return m


def bench_signatures(quick: bool) -> None:
    """Run in a child with RAYON_NUM_THREADS=1: per-core throughput of both."""
    from llmpipe.dedup import minhash_signatures

    docs = real_docs()
    nbytes = sum(len(d.encode()) for d in docs)
    arr = pa.array(docs, pa.large_string())
    reps = 3 if quick else 5
    sample = docs[:: 8 if quick else 3]
    # warm both sides up outside the timed rounds (datasketch's import alone costs ~1 CPU second,
    # which would otherwise be charged to its first round)
    minhash_signatures(arr[:10])
    datasketch_signature(sample[0])
    sbytes = sum(len(d.encode()) for d in sample)
    # CPU seconds of this process (the machine is shared, wall time depends on the neighbours),
    # in interleaved rounds so that both see the same conditions
    ours_s: list[float] = []
    theirs_s: list[float] = []
    for _ in range(reps):
        t = time.process_time()
        minhash_signatures(arr)
        ours_s.append(time.process_time() - t)
        t = time.process_time()
        for d in sample:
            datasketch_signature(d)
        theirs_s.append(time.process_time() - t)
    ours, theirs = nbytes * reps / sum(ours_s), sbytes * reps / sum(theirs_s)
    # the best round of each side as well: neighbours on the shared machine slow a round down
    # (CPU time grows when the core is shared), never speed it up
    ours_best, theirs_best = nbytes / min(ours_s), sbytes / min(theirs_s)
    print(f"signatures, one core, {len(docs)} real docs ({nbytes / 1e6:.1f} MB), word 5-grams, 112 hashes:")
    print(f"  llmpipe    {ours / 1e6:8.1f} MB per CPU second (best of {reps} rounds {ours_best / 1e6:.1f})")
    print(
        f"  datasketch {theirs / 1e6:8.2f} MB per CPU second (best {theirs_best / 1e6:.2f}; "
        f"update_batch + Python shingling, {len(sample)} docs)"
    )
    print(f"  ratio      {ours / theirs:8.1f}x (best rounds: {ours_best / theirs_best:.1f}x)")


def synthesize(n: int, path: Path, seed: int = 0) -> int:
    """n documents of 5-15 real sentences; 10% are light edits of an earlier document."""
    rng = random.Random(seed)
    sentences = []
    for d in real_docs():
        sentences += [s.strip() for s in d.replace("\n", " ").split(" . ") if len(s.split()) >= 4]
    with zipfile.ZipFile(DATA / "reference" / "nltk" / "abc.zip") as z:
        for name in z.namelist():
            if name.endswith(".txt"):
                sentences += [s for s in z.read(name).decode("latin-1").split("\n") if len(s.split()) >= 4]
    vocab = sorted({w for s in sentences[:5000] for w in s.split() if w.isalpha()})
    writer = pq.ParquetWriter(path, pa.schema([("id", pa.string()), ("text", pa.large_string())]))
    recent: list[str] = []
    planted = 0
    chunk = 50_000
    for start in range(0, n, chunk):
        ids, texts = [], []
        for i in range(start, min(n, start + chunk)):
            if recent and rng.random() < 0.1:
                words = rng.choice(recent).split(" ")
                for _ in range(max(1, len(words) // 100)):
                    words[rng.randrange(len(words))] = rng.choice(vocab)
                text = " ".join(words)
                planted += 1
            else:
                text = " . ".join(rng.choice(sentences) for _ in range(rng.randint(5, 15))) + " ."
            recent.append(text)
            if len(recent) > 2000:
                recent.pop(rng.randrange(len(recent)))
            ids.append(f"syn-{rng.getrandbits(48):012x}-{i:07d}")
            texts.append(text)
        writer.write_table(pa.table({"id": ids, "text": pa.array(texts, pa.large_string())}))
    writer.close()
    return planted


def run_dedup(docs_path: str, work: str) -> None:
    """Child: the near_dedup stage's phases on the synthetic documents; prints one JSON line."""
    from llmpipe.curate.stage import RunContext
    from llmpipe.curate.stages.near_dedup import NearDedup

    stage = NearDedup(NearDedup.Config())
    work_dir = Path(work)
    t0 = time.perf_counter()
    key_files = []
    pf = pq.ParquetFile(docs_path)
    per_file = 100_000
    writer, rows, nfile = None, 0, 0
    for batch in pf.iter_batches(batch_size=10_000):
        rb = pa.record_batch({"id": batch.column("id"), "text": batch.column("text")})
        keys = stage.prepare(rb)
        if writer is None:
            path = work_dir / f"{nfile:06d}.keys.parquet"
            writer = pq.ParquetWriter(path, keys.schema, compression="zstd")
            key_files.append(path)
        writer.write_table(keys)
        rows += batch.num_rows
        if rows >= per_file * (nfile + 1):
            writer.close()
            writer, nfile = None, nfile + 1
    if writer is not None:
        writer.close()
    t1 = time.perf_counter()
    g = work_dir / "global"
    g.mkdir()
    drops = stage.resolve(key_files, g, RunContext(input_words=0))
    t2 = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    peak = ru.ru_maxrss * 1024
    key_bytes = sum(f.stat().st_size for f in key_files)
    print(
        json.dumps(
            {
                "prepare_s": t1 - t0,
                "resolve_s": t2 - t1,
                "drops": drops.num_rows,
                "peak_rss": peak,
                "cpu_s": ru.ru_utime + ru.ru_stime,
                "key_bytes": key_bytes,
            }
        )
    )


def bench_full(quick: bool) -> None:
    n = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="bench-dedup-") as tmp:
        docs_path = Path(tmp) / "docs.parquet"
        t = time.perf_counter()
        planted = synthesize(n, docs_path)
        meta = pq.read_metadata(docs_path)
        text_bytes = sum(
            meta.row_group(i).column(1).total_uncompressed_size for i in range(meta.num_row_groups)
        )
        print(
            f"\nfull near dedup of {n:,} synthetic docs (~{text_bytes / 1e9:.2f} GB text, {planted:,} planted)"
        )
        print(f"  (synthesised in {time.perf_counter() - t:.0f}s)")
        threads = os.environ.get("RAYON_NUM_THREADS", "2")
        env = {**os.environ, "RAYON_NUM_THREADS": threads}
        work = Path(tmp) / "work"
        work.mkdir()
        out = subprocess.run(
            [sys.executable, __file__, "--child-dedup", str(docs_path), str(work)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        total = r["prepare_s"] + r["resolve_s"]
        print(f"  llmpipe ({threads} threads): prepare {r['prepare_s']:.1f}s + resolve {r['resolve_s']:.1f}s")
        print(f"    = {total:.1f}s wall, {n / total:,.0f} docs/s, peak RSS {r['peak_rss'] / 2**30:.2f} GiB")
        print(f"    CPU {r['cpu_s']:.1f}s in all ({r['cpu_s'] / 2:.1f}s if spread over 2 idle cores)")
        print(f"    dropped {r['drops']:,} near duplicates; key files {r['key_bytes'] / 1e9:.2f} GB on disk")

        # the peer on a sample: datasketch MinHash + MinHashLSH(14 x 8) insert and query, one core
        import datasketch

        m = 2_000 if quick else 10_000
        sample = pq.read_table(docs_path).slice(0, m).column("text").to_pylist()
        t = time.process_time()
        lsh = datasketch.MinHashLSH(num_perm=112, params=(14, 8))
        for i, text in enumerate(sample):
            mh = datasketch_signature(text)
            lsh.query(mh)
            lsh.insert(str(i), mh)
        ds_rate = m / (time.process_time() - t)
        ours_rate = n / r["cpu_s"]
        print(f"  datasketch (first {m:,} docs, no verification): {ds_rate:,.0f} docs per CPU second")
        print(f"  llmpipe: {ours_rate:,.0f} docs per CPU second; ratio {ours_rate / ds_rate:.1f}x per core")


DATATROVE_MINHASH = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.pipeline.dedup import MinhashDedupSignature, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.utils.hashing import HashConfig

if __name__ == "__main__":
    inp, work = sys.argv[1], sys.argv[2]
    cfg = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14, hashes_per_bucket=8, n_grams=5)
    kw = dict(workers=1, logging_dir=f"{work}/logs", skip_completed=False, start_method="fork")
    LocalPipelineExecutor([JsonlReader(inp), MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg)],
                          tasks=1, **kw).run()
    LocalPipelineExecutor([MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets",
                                               config=cfg)], tasks=cfg.num_buckets, **kw).run()
    LocalPipelineExecutor([MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove",
                                               config=cfg)], tasks=1, **kw).run()
    LocalPipelineExecutor([JsonlReader(inp), MinhashDedupFilter(input_folder=f"{work}/remove"),
                           JsonlWriter(f"{work}/out", compression=None)], tasks=1, **kw).run()
"""


def recall_bases() -> list[str]:
    """Real documents of at least 50 words, each text once."""
    import tarfile

    from dedup_corpus import movie_reviews

    docs = movie_reviews(DATA, 2000)
    with gzip.open(DATA / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        docs += [json.loads(line)["text"] for line in f]
    with tarfile.open(DATA / "reference" / "python-3.11-docs.rst.tar.gz") as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            fh = tar.extractfile(m) if m.isfile() else None
            if fh is not None:
                docs.append(fh.read().decode("utf-8", errors="replace"))
    seen: set[str] = set()
    out = []
    for d in docs:
        key = " ".join(d.split())
        if len(d.split()) >= 50 and key not in seen:
            seen.add(key)
            out.append(d)
    return out


def recall_corpus(n_bases: int, seed: int = 0) -> tuple[list[str], list[int], list[str]]:
    """(texts, group of each text (-1: not planted), edit of each text ("" for an original)): every real
    document once, in a seeded order, then 1-3 edited copies of each of the first ``n_bases``, shuffled."""
    from dedup_corpus import KINDS, mutate

    rng = random.Random(seed)
    docs = recall_bases()
    rng.shuffle(docs)
    n_bases = min(n_bases, len(docs) // 2)
    vocab = sorted({w for d in docs[:200] for w in d.split() if w.isalpha()})
    groups = [g if g < n_bases else -1 for g in range(len(docs))]
    edits = [""] * len(docs)
    copies = []
    k = 0
    for g in range(n_bases):
        for _ in range(rng.randint(1, 3)):
            kind, rate = KINDS[k % len(KINDS)]
            k += 1
            copies.append((mutate(docs[g], kind, rate, rng, vocab), g, f"{kind}@{rate:g}" if rate else kind))
    rng.shuffle(copies)
    return (
        docs + [c[0] for c in copies],
        groups + [c[1] for c in copies],
        edits + [c[2] for c in copies],
    )


@dataclass
class Recall:
    copies: int  # planted copies (a group of one original and c copies counts c)
    caught: int  # removed, per group at most its number of copies
    groups: int
    groups_multi: int  # groups that keep more than one document
    groups_gone: int  # groups with every document removed
    outside: int  # removed documents that belong to no planted group
    per_edit: dict[str, tuple[int, int]]  # edit -> (copies removed, copies)


def recall_scores(removed: set[int], groups: list[int], edits: list[str]) -> Recall:
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        if g >= 0:
            members.setdefault(g, []).append(i)
    per_edit: dict[str, tuple[int, int]] = {}
    for i, e in enumerate(edits):
        if e:
            hit, n = per_edit.get(e, (0, 0))
            per_edit[e] = (hit + (i in removed), n + 1)
    return Recall(
        copies=sum(len(m) - 1 for m in members.values()),
        caught=sum(min(sum(i in removed for i in m), len(m) - 1) for m in members.values()),
        groups=len(members),
        groups_multi=sum(sum(i not in removed for i in m) > 1 for m in members.values()),
        groups_gone=sum(all(i in removed for i in m) for m in members.values()),
        outside=sum(1 for i in removed if groups[i] < 0),
        per_edit=per_edit,
    )


def bench_recall(n_bases: int) -> None:
    from llmpipe.curate.stage import RunContext
    from llmpipe.curate.stages.near_dedup import NearDedup

    texts, groups, edits = recall_corpus(n_bases)
    ids = [f"doc-{i:06d}" for i in range(len(texts))]
    index = {d: i for i, d in enumerate(ids)}
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(
        f"\nrecall on planted near duplicates: {len(texts):,} documents ({mb:.1f} MB), "
        f"{sum(1 for g in groups if g >= 0) - len({g for g in groups if g >= 0}):,} planted copies "
        f"of {len({g for g in groups if g >= 0}):,} real documents"
    )
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        work = Path(tmp)
        stage = NearDedup(NearDedup.Config())
        t = time.process_time()
        keys = stage.prepare(
            pa.record_batch({"id": pa.array(ids), "text": pa.array(texts, pa.large_string())})
        )
        pq.write_table(keys, work / "keys.parquet")
        (work / "global").mkdir()
        drops = stage.resolve([work / "keys.parquet"], work / "global", RunContext(input_words=0))
        ours_cpu = time.process_time() - t
        ours = {index[d] for d in drops.column("id").to_pylist()}

        (work / "in").mkdir()
        with open(work / "in" / "docs.jsonl", "w", encoding="utf-8") as f:
            for d, text in zip(ids, texts, strict=True):
                f.write(json.dumps({"id": d, "text": text}) + "\n")
        (work / "dt.py").write_text(DATATROVE_MINHASH)
        code = (
            "import resource, subprocess, sys; "
            "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "r = resource.getrusage(resource.RUSAGE_CHILDREN); print(r.ru_utime + r.ru_stime)"
        )
        cmd = [
            sys.executable,
            "-c",
            code,
            sys.executable,
            str(work / "dt.py"),
            str(work / "in"),
            str(work / "dt"),
        ]
        theirs_cpu = float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()[-1])
        kept = set()
        for p in (work / "dt" / "out").glob("*.jsonl"):
            with p.open(encoding="utf-8") as f:  # not splitlines: texts hold U+2028 and the like
                kept |= {json.loads(line)["id"] for line in f}
        theirs = {i for i, d in enumerate(ids) if d not in kept}

    rows = [("llmpipe", recall_scores(ours, groups, edits), ours_cpu)]
    rows.append(("datatrove", recall_scores(theirs, groups, edits), theirs_cpu))
    for name, r, cpu in rows:
        print(
            f"  {name:9s} removed {r.caught:,} of {r.copies:,} planted copies ({100 * r.caught / r.copies:.1f}%); "
            f"{r.groups_multi:,} of {r.groups:,} groups keep more than one document, {r.groups_gone} lose all; "
            f"{r.outside} removed outside the planted groups; {cpu:.1f} CPU-s"
        )
    print("  per edit, share of the copies removed (llmpipe / datatrove):")
    ours_r, theirs_r = rows[0][1], rows[1][1]
    for e in sorted(
        ours_r.per_edit, key=lambda e: (e.split("@")[0], float(e.split("@")[1]) if "@" in e else 0.0)
    ):
        (a, n), (b, _) = ours_r.per_edit[e], theirs_r.per_edit[e]
        print(f"    {e:18s} {100 * a / n:5.1f}% / {100 * b / n:5.1f}%  ({n} copies)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-dedup":
        run_dedup(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child-signatures":
        bench_signatures(sys.argv[2] == "quick")
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k documents instead of 1M, smaller samples")
    ap.add_argument("--recall-only", action="store_true", help="only the recall on planted near duplicates")
    ap.add_argument("--recall-bases", type=int, default=1500, help="real documents given edited copies")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if not args.recall_only:
        env = {**os.environ, "RAYON_NUM_THREADS": "1"}
        mode = "quick" if args.quick else "full"
        subprocess.run([sys.executable, __file__, "--child-signatures", mode], env=env, check=True)
        bench_full(args.quick)
    bench_recall(args.recall_bases)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
