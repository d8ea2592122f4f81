"""Work files of a curate run: Arrow IPC (what llmpipe writes) against Parquet (what it wrote before),
the same documents and token ids, the same writes and reads.

A curate run writes each part's surviving documents once per segment and reads them back in the
next one; the tokenizer's training reads their text once; tokenize reads them again and writes the
token ids, which pack reads back. This replays that traffic on the documents of a mixed corpus
(``bench_curate.py``'s, ~48% kept by the default config, so half of it here) with the work
directory's own writers and readers, in one process, and prints the CPU seconds (user + system) of
each format and their ratio. Token ids: one per 4 bytes of text (the kept text's BPE rate is ~4.6).

Usage: python bench/bench_work_files.py [--mb 400] [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from bench_curate import sources, write_mixed_corpus
from llmpipe.curate.workdir import AtomicArrowWriter, AtomicParquetWriter, iter_arrow, open_parquet
from llmpipe.memory import tune_allocators

BATCH_BYTES = 16 << 20  # what a segment writes at a time (steps.COALESCE_BYTES)


def docs_table(corpus: Path) -> pa.Table:
    tables = [pj.read_json(p) for p in sorted(corpus.glob("*.jsonl"))]
    t = pa.concat_tables(tables).select(["id", "text"])
    n = t.num_rows
    return t.append_column("lang", pa.array(["eng_Latn"] * n)).append_column(
        "lang_score", pa.array(np.full(n, 0.9, dtype=np.float32))
    )


def batches_of(t: pa.Table, nbytes: int) -> Iterator[pa.Table]:
    sizes = pc.binary_length(t.column("text")).to_numpy()
    at, acc = 0, 0
    for i, s in enumerate(sizes):
        acc += int(s)
        if acc >= nbytes:
            yield t.slice(at, i + 1 - at)
            at, acc = i + 1, 0
    if at < t.num_rows:
        yield t.slice(at)


def token_ids(texts: pa.Array | pa.ChunkedArray) -> pa.LargeListArray:
    sizes = pc.binary_length(texts).to_numpy().astype(np.int64)
    lengths = np.maximum(sizes // 4, 1)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = (np.arange(offsets[-1], dtype=np.uint64) * 2654435761 % 32000).astype(np.uint32)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(ids))


Reader = Callable[[Path, int, list[str] | None], Iterator[pa.RecordBatch]]


def parquet_reader(path: Path, rows: int, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    return open_parquet(path).iter_batches(batch_size=rows, columns=columns)


def arrow_reader(path: Path, rows: int, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    return iter_arrow(path, batch_size=rows, columns=columns)


def replay(docs: pa.Table, work: Path, writer: type, read: Reader, ext: str) -> tuple[float, int]:
    """CPU seconds of the work-file traffic, and a checksum of what was read."""
    t0 = time.process_time()
    seg0 = work / f"seg0.{ext}"
    w = writer(seg0)
    for b in batches_of(docs, BATCH_BYTES):
        w.write(b)
    w.commit()
    seg1 = work / f"seg1.{ext}"  # the next segment: read, keep, write
    w = writer(seg1)
    for b in read(seg0, 1000, None):
        w.write(b)
    w.commit()
    check = 0
    for b in read(seg1, 1000, ["text"]):  # the tokenizer's training sample
        check += b.num_rows
    tokens = work / f"tokens.{ext}"
    w = writer(tokens)
    for b in read(seg1, 1000, None):  # tokenize
        w.write(
            pa.table(
                {"tokens": token_ids(b.column("text")), "words": pa.array(np.ones(b.num_rows, np.int64))}
            )
        )
    w.commit()
    for b in read(tokens, 256, ["tokens"]):  # pack
        check += len(b.column("tokens").flatten())
    return time.process_time() - t0, check


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--mb", type=int, default=400, help="the corpus (MB of JSONL); half its documents are replayed"
    )
    ap.add_argument("--quick", action="store_true", help="--mb 40")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    mb = 40 if args.quick else args.mb
    tune_allocators()  # as in a curate process
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        write_mixed_corpus(corpus, mb << 20, 1, sources())
        docs = docs_table(corpus)
        docs = docs.slice(0, docs.num_rows // 2)  # what the filters keep
        print(
            f"{docs.num_rows:,} documents, {docs.nbytes / 1e6:.0f} MB in Arrow; CPU s (user + system), best of {args.rounds}"
        )
        best: dict[str, float] = {}
        checks: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, writer, read, ext in [
                ("parquet", AtomicParquetWriter, parquet_reader, "parquet"),
                ("arrow ipc", AtomicArrowWriter, arrow_reader, "arrow"),
            ]:
                work = Path(tmp) / name.replace(" ", "-")
                work.mkdir(exist_ok=True)
                cpu, check = replay(docs, work, writer, read, ext)
                best[name] = min(best.get(name, cpu), cpu)
                checks[name] = check
        assert checks["parquet"] == checks["arrow ipc"], checks
        for name, cpu in best.items():
            print(f"  {name:<10} {cpu:6.2f} CPU-s")
        print(f"  Parquet / Arrow IPC: {best['parquet'] / best['arrow ipc']:.2f}x the CPU")


if __name__ == "__main__":
    main()
