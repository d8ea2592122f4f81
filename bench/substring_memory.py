"""Peak memory of ``substring_dedup`` by phase, for the same text cut into 2 and into 8 partitions.

What bounds the stage's memory is the pair of partitions one suffix-array task holds; this measures
it. Each partition count runs in its own child process, which streams a JSONL of real text (bench_curate's
paragraphs recombined into documents) in 8 MB blocks through the stage as curate runs it: ``prepare``
per block (key files), ``resolve`` (plan, partitions, one suffix array per pair of partitions, spans
per partition, then per input part; in this process, as ``--workers 1``), then the rewrite per
block (each block is one input part, rewritten with its own part's spans only, as a curate worker). Before each phase
the child resets its peak RSS (``/proc/self/clear_refs``, Linux) and reads it (``VmHWM``) after, so
each figure is that phase's own peak (the interpreter and libraries included). Not a comparison
with a peer: the figures document the memory bound (docs/dedup.md).

``--plan-docs N,M``: also the partition plan's peak on N and M documents (ids only, 20 bytes of text
each), its external sort against the in-memory sort it replaced, each in its own child process, with
a hash of the plans made (equal for both). ``--plan-only``: that table alone.

Usage: python bench/substring_memory.py [--mb 40] [--partitions 2,8] [--block-mb 8] [--plan-docs 4000000,16000000] [--plan-hows in-memory,external] [--plan-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("prepare", "plan", "partitions", "suffix arrays", "spans", "per part", "rewrite")


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _phase(peaks: dict[str, float], name: str, fn: Callable[[], object]) -> object:
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from the current RSS
    t = time.process_time()
    out = fn()
    peaks[name] = _peak_mb()
    peaks[name + " CPU-s"] = time.process_time() - t
    return out


def child(src: Path, work: Path, partitions: int, block_mb: float) -> None:
    import pyarrow as pa
    import pyarrow.json as pajson
    import pyarrow.parquet as pq
    from llmpipe.curate.stage import StageCounts
    from llmpipe.curate.stages import substring_dedup as sd

    sizes = [len(json.loads(line)["text"].encode()) + 1 for line in src.open(encoding="utf-8")]
    # the planner fills each partition up to partition_bytes, whole documents: with one longest
    # document of slack per partition, it makes exactly ``partitions``
    part = -(-sum(sizes) // partitions) + max(sizes)
    stage = sd.SubstringDedup(sd.SubstringDedup.Config(enabled=True, partition_bytes=part))

    def batches() -> Iterator[pa.RecordBatch]:
        for b in pajson.open_json(src, read_options=pajson.ReadOptions(block_size=int(block_mb * (1 << 20)))):
            yield b.select(["id", "text"])

    peaks: dict[str, float] = {}
    keys: list[Path] = []

    def prepare() -> None:
        for j, batch in enumerate(batches()):
            keys.append(work / f"{j:05d}.keys.parquet")
            pq.write_table(stage.prepare(batch), keys[-1])

    g = work / "global"
    _phase(peaks, "prepare", prepare)
    plans = _phase(peaks, "plan", lambda: sd.plan_partitions(keys, part, g / "plan"))
    files = [str(f) for f in keys]
    parts = _phase(
        peaks,
        "partitions",
        lambda: [sd.build_partition(files, p, g / "text" / f"{b:05d}") for b, p in enumerate(plans)],  # type: ignore[attr-defined]
    )
    k = len(parts)  # type: ignore[arg-type]
    pairs = [(a, b) for b in range(k) for a in range(b + 1)]
    spans = _phase(
        peaks,
        "suffix arrays",
        lambda: [
            sd.pair_spans(parts[a], parts[b], stage.cfg.min_length, g / "pairs" / f"{a:05d}-{b:05d}.npy")  # type: ignore[index]
            for a, b in pairs
        ],
    )
    by_b: dict[int, list[Path]] = {}
    for (_, b), s in zip(pairs, spans, strict=True):  # type: ignore[call-overload]
        by_b.setdefault(b, []).append(s)

    written = _phase(
        peaks,
        "spans",
        lambda: [sd.partition_spans(parts[b], by_b[b], g / "spans" / f"{b:05d}") for b in range(k)],  # type: ignore[index]
    )
    by_file: dict[int, list[Path]] = {f: [] for f in range(len(keys))}
    for b, fs in enumerate(written):  # type: ignore[arg-type]
        for f in fs:
            by_file[f].append(g / "spans" / f"{b:05d}" / f"{f:06d}.parquet")
    _phase(
        peaks,
        "per part",
        lambda: [sd.file_spans(by_file[f], sd.spans_file(g, keys[f])) for f in range(len(keys))],
    )
    rows = [pq.read_metadata(sd.spans_file(g, f)).num_rows for f in keys]
    counts = StageCounts(stage.name)
    digest = hashlib.sha256()

    def rewrite() -> None:  # each block by the rewriter of its key file, as a curate worker runs it
        for j, batch in enumerate(batches()):
            out = stage.rewriter(g, keys[j]).run(batch, counts)
            for col in ("id", "text"):
                digest.update("\0".join(out.column(col).to_pylist()).encode())

    _phase(peaks, "rewrite", rewrite)
    peaks["partitions_made"] = k
    peaks["partition_mb"] = part / 1e6
    peaks["bytes_removed"] = counts.counters["bytes_removed"]
    peaks["sha256"] = digest.hexdigest()[:16]
    peaks["parts"] = len(keys)
    peaks["spans_total"] = sum(rows)
    peaks["spans_max_part"] = max(rows)
    print(json.dumps(peaks))


def plan_in_memory(keys: list[Path], partition_bytes: int, out: Path) -> list[Path]:
    """The plan as substring_dedup made it before its external sort (up to 97baeed): every
    document's row in one table, sorted whole in this process, cut, one plan file per partition.
    The reference the bench compares with, in memory and in output."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from llmpipe.curate.workdir import read_parquet, write_table_atomic

    tables = []
    for f, path in enumerate(keys):
        t = read_parquet(path, columns=["id", "text"])
        n = t.num_rows
        tables.append(
            pa.table(
                {
                    "id": t["id"],
                    "file": pa.array(np.full(n, f, np.int32)),
                    "row": pa.array(np.arange(n, dtype=np.int64)),
                    "bytes": pc.binary_length(t["text"]).cast(pa.int64()),
                }
            )
        )
    docs = pa.concat_tables(tables).sort_by(
        [("id", "ascending"), ("file", "ascending"), ("row", "ascending")]
    )
    size = docs["bytes"].to_numpy() + 1
    bounds = [0]
    acc = 0
    for j, s in enumerate(size.tolist()):
        if acc and acc + s > partition_bytes:
            bounds.append(j)
            acc = 0
        acc += s
    bounds.append(len(size))
    plans = []
    for b in range(len(bounds) - 1):
        p = out / f"{b:05d}.parquet"
        write_table_atomic(p, docs.slice(bounds[b], bounds[b + 1] - bounds[b]).select(["id", "file", "row"]))
        plans.append(p)
    return plans


def plan_inputs(docs: int, work: Path) -> None:
    """4 key files of ``docs`` documents in all, ids as curate writes them (``<input>/<n>``, in random
    order), each 20 bytes of text (written by their own process: none of it in a plan's figure)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    order = np.random.default_rng(0).permutation(docs)
    for f, chunk in enumerate(np.array_split(order, 4)):
        num = pc.cast(pa.array(chunk), pa.string())
        ids = pc.binary_join_element_wise("cc-main-2019-30-extracted.jsonl.gz/", num, "")
        text = pa.repeat(pa.scalar("x" * 20, pa.large_string()), len(chunk))
        pq.write_table(
            pa.table({"id": ids, "text": text}), work / f"{f}.keys.parquet", row_group_size=1 << 16
        )


def plan_child(docs: int, work: Path, how: str) -> None:
    """The plan's peak on the key files of ``plan_inputs``: what grew per document in the process
    that resolves. ``how``: ``external`` (substring_dedup's plan, its sort tasks in this process
    as ``--workers 1``) or ``in-memory`` (the plan before it)."""
    import hashlib

    import numpy as np
    import pyarrow.parquet as pq
    from llmpipe.buffers import string_buffers
    from llmpipe.curate.stages import substring_dedup as sd

    keys = [work / f"{f}.keys.parquet" for f in range(4)]
    Path("/proc/self/clear_refs").write_text("5")
    before = _peak_mb()
    t, w = time.process_time(), time.perf_counter()
    out = work / how
    plans = (
        sd.plan_partitions(keys, 1 << 20, out) if how == "external" else plan_in_memory(keys, 1 << 20, out)
    )
    cpu, wall = time.process_time() - t, time.perf_counter() - w
    peak = _peak_mb()
    digest = hashlib.sha256()
    for p in plans:  # the plan's rows, partition by partition: equal for both ways
        t = pq.read_table(p)
        offsets, data = string_buffers(t["id"])
        digest.update(data[offsets[0] : offsets[-1]].tobytes() + np.diff(offsets).tobytes())
        digest.update(t["file"].to_numpy().tobytes() + t["row"].to_numpy().tobytes() + b"|")
    print(
        json.dumps(
            {
                "peak": peak,
                "per_doc": (peak - before) * 2**20 / docs,
                "before": before,
                "cpu": cpu,
                "wall": wall,
                "partitions": len(plans),
                "sha256": digest.hexdigest()[:16],
            }
        )
    )


def plan_table(counts: list[int], hows: list[str], tmp: Path) -> None:
    """Both plans on each document count, each in its own child process; one line each. B/doc:
    the peak above the RSS before the plan (the interpreter and libraries), per document."""
    print("plan (4 key files of ids <input>/<n> in random order, 20 bytes of text each, 1 MB partitions)")
    head = f"{'documents':>12s} {'plan':>10s} {'RSS before':>12s} {'peak RSS MB':>12s} {'B/doc':>6s}"
    print(head + f" {'CPU-s':>7s} {'wall s':>7s}  sha256 of the plan (its rows, partition by partition)")
    for docs in counts:
        work = tmp / f"plan-{docs}"
        work.mkdir()
        cmd = [sys.executable, __file__, "--plan-inputs", str(docs), "--work", str(work)]
        subprocess.run(cmd, check=True)
        for how in hows:
            cmd = [
                sys.executable,
                __file__,
                "--plan-child",
                str(docs),
                "--plan-how",
                how,
                "--work",
                str(work),
            ]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            print(
                f"{docs:12,d} {how:>10s} {r['before']:12.0f} {r['peak']:12.0f} {r['per_doc']:6.0f} {r['cpu']:7.1f}"
                f" {r['wall']:7.1f}  {r['sha256']} ({r['partitions']} partitions)",
                flush=True,
            )
            shutil.rmtree(work / how)
        shutil.rmtree(work)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=40)
    ap.add_argument("--partitions", default="2,8")
    ap.add_argument("--block-mb", type=float, default=8, help="input part (key file) size")
    ap.add_argument(
        "--plan-docs", default="", help="also measure the plan on these many documents (comma-separated)"
    )
    ap.add_argument("--plan-only", action="store_true", help="measure the plan only")
    ap.add_argument("--plan-child", type=int)
    ap.add_argument("--plan-inputs", type=int)
    ap.add_argument("--plan-how", choices=("external", "in-memory"), default="external")
    ap.add_argument("--plan-hows", default="in-memory,external", help="the plans --plan-docs measures")
    ap.add_argument("--child", type=int)
    ap.add_argument("--src")
    ap.add_argument("--work")
    args = ap.parse_args()
    if args.plan_inputs:
        plan_inputs(args.plan_inputs, Path(args.work))
        return
    if args.plan_child:
        plan_child(args.plan_child, Path(args.work), args.plan_how)
        return
    plan_docs = [int(x) for x in args.plan_docs.split(",") if x]
    hows = args.plan_hows.split(",")
    if args.plan_only:
        with tempfile.TemporaryDirectory() as tmp:
            plan_table(plan_docs, hows, Path(tmp))
        return
    if args.child:
        child(Path(args.src), Path(args.work), args.child, args.block_mb)
        return
    from bench_curate import paragraphs, write_corpus

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_corpus(root / "in", int(args.mb * 1e6), 1, paragraphs())
        src = next((root / "in").glob("*.jsonl"))
        print(
            f"{src.stat().st_size / 1e6:.1f} MB JSONL of real text; peak RSS (MB) of each phase, one process"
        )
        print(f"{'partitions':>10s} " + " ".join(f"{p:>13s}" for p in PHASES) + "  bytes removed")
        for k in (int(x) for x in args.partitions.split(",")):
            work = root / f"k{k}"
            work.mkdir()
            cmd = [sys.executable, __file__, "--child", str(k), "--src", str(src), "--work", str(work)]
            cmd += ["--block-mb", str(args.block_mb)]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            label = f"{r['partitions_made']} x {r['partition_mb']:.1f} MB"
            print(f"{label:>10s} " + " ".join(f"{r[p]:13.0f}" for p in PHASES) + f"  {r['bytes_removed']:,}")
            print(f"{'':>10s} sha256 of the rewritten (id, text): {r['sha256']}")
            print(f"{'CPU-s':>10s} " + " ".join(f"{r[p + ' CPU-s']:13.1f}" for p in PHASES))
            print(
                f"{r['spans_total']:,} spans in {r['parts']} input parts, at most {r['spans_max_part']:,} in one"
            )
        if plan_docs:
            plan_table(plan_docs, hows, root)


if __name__ == "__main__":
    main()
