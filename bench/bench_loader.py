"""Loader throughput: llmpipe's TokenLoader vs a numpy memmap reader, MosaicML streaming, and a raw copy.

llmpipe's rows: the default loader (int32 ids; input and target are views of one [B, L+1] buffer),
the same with per-token document ids, and with int64 ids. numpy's rows gather the same rows from a
memmap and convert them to int32 and to int64, so that each loader is compared with the reader that
hands out the same dtype (the last lines: like for like).

All read the same tokens (real text from ../shared/data, UTF-8 bytes as token ids, uint16) in the
same seeded random order of samples, one process, batches of ``--batch`` samples of ``--seq-len + 1``
tokens. Reported: tokens/s and GB/s of token bytes (best wall time of the rounds), tokens per CPU second
of this process (all its threads: the loader's prefetch thread counts), and each reader's ratio to
llmpipe's default loader.

    python bench/bench_loader.py [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def corpus_tokens(limit_bytes: int) -> np.ndarray:
    with gzip.open(DATA / "reference" / "gcide.dict.gz", "rb") as f:
        raw = f.read(limit_bytes)
    return np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)


def write_llmpipe(out: Path, tokens: np.ndarray, seq_len: int) -> None:
    from llmpipe.data import ShardWriter

    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text("{}")
    w = ShardWriter(
        out,
        seq_len=seq_len,
        vocab_size=257,
        eos_id=256,
        tokenizer_file=out / "tokenizer.json",
        val_fraction=0,
    )
    w.add_documents([tokens])
    w.close()


def bench_llmpipe(
    out: Path, batch: int, steps: int, doc_ids: bool, dtype: str = "int32"
) -> tuple[float, float]:
    import torch
    from llmpipe.data import ShardDataset, TokenLoader

    ds = ShardDataset(out, "train", verify="fast")
    it = iter(TokenLoader(ds, batch, seed=0, prefetch=4, doc_ids=doc_ids, dtype=getattr(torch, dtype)))
    next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        b = next(it)
        assert b.input.shape[0] == batch
    return time.perf_counter() - t0, time.process_time() - c0


def bench_memmap(
    path: Path, n: int, width: int, batch: int, steps: int, dtype: str = "int64"
) -> tuple[float, float]:
    mm = np.memmap(path, dtype=np.uint16, mode="r").reshape(n, width)
    perm = np.random.default_rng([0, 0]).permutation(n)
    t0, c0 = time.perf_counter(), time.process_time()
    for s in range(steps):
        rows = np.asarray(mm[np.sort(perm[s * batch : (s + 1) * batch])], dtype=dtype)
        assert rows.shape[0] == batch
    return time.perf_counter() - t0, time.process_time() - c0


def bench_copy(samples: np.ndarray, batch: int, steps: int) -> tuple[float, float]:
    perm = np.random.default_rng([0, 0]).permutation(len(samples))
    buf = np.empty((batch, samples.shape[1]), dtype=samples.dtype)
    t0, c0 = time.perf_counter(), time.process_time()
    for s in range(steps):
        np.take(samples, perm[s * batch : (s + 1) * batch], axis=0, out=buf)
    return time.perf_counter() - t0, time.process_time() - c0


def bench_streaming(tmp: Path, samples: np.ndarray, batch: int, steps: int) -> tuple[float, float] | None:
    try:
        from streaming import MDSWriter, StreamingDataset
    except ImportError:
        return None
    out = tmp / "mds"
    with MDSWriter(out=str(out), columns={"tokens": f"ndarray:uint16:{samples.shape[1]}"}) as w:
        for row in samples:
            w.write({"tokens": row})
    ds = StreamingDataset(local=str(out), batch_size=batch, shuffle=True, shuffle_seed=0)
    it = iter(ds)
    next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        rows = [next(it)["tokens"] for _ in range(batch)]
        np.stack(rows).astype(np.int64)
    elapsed = time.perf_counter() - t0, time.process_time() - c0
    del it, ds
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every reader; the best is kept")
    args = ap.parse_args()
    tokens = corpus_tokens(8_000_000 if args.quick else 40_000_000)
    width = args.seq_len + 1
    n = len(tokens) // width
    samples = tokens[: n * width].reshape(n, width)
    steps = min(n // args.batch - 1, 60 if args.quick else 300)
    tok_per_step = args.batch * args.seq_len
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        write_llmpipe(tmp / "shards", tokens, args.seq_len)
        raw = tmp / "raw.bin"
        samples.tofile(raw)
        # rounds of every reader in turn; each reader's best round is reported (on a shared machine
        # a busy neighbour only ever slows a round down)
        readers = {
            "llmpipe TokenLoader": lambda: bench_llmpipe(tmp / "shards", args.batch, steps, False),
            "llmpipe TokenLoader + doc ids": lambda: bench_llmpipe(tmp / "shards", args.batch, steps, True),
            "llmpipe TokenLoader int64": lambda: bench_llmpipe(
                tmp / "shards", args.batch, steps, False, "int64"
            ),
            "numpy memmap gather int32": lambda: bench_memmap(raw, n, width, args.batch, steps, "int32"),
            "numpy memmap gather int64": lambda: bench_memmap(raw, n, width, args.batch, steps, "int64"),
            "raw memory copy (np.take)": lambda: bench_copy(samples, args.batch, steps),
        }
        # per reader: the best wall time and the best CPU time of this process (all its threads) over the
        # rounds; on a shared machine the CPU time is the steadier of the two
        wall = {name: float("inf") for name in readers}
        cpu = {name: float("inf") for name in readers}
        for _ in range(args.rounds):
            for name, run in readers.items():
                w, c = run()
                wall[name], cpu[name] = min(wall[name], w), min(cpu[name], c)
        st = bench_streaming(tmp, samples, args.batch, min(steps, 60))
        if st is not None:
            scale = steps / min(steps, 60)
            wall["MosaicML streaming (MDS)"], cpu["MosaicML streaming (MDS)"] = st[0] * scale, st[1] * scale
        shutil.rmtree(tmp / "mds", ignore_errors=True)
    print(
        f"{n:,} samples of {width} uint16 tokens, batch {args.batch}, {steps} steps, one process, "
        f"best of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    base, base_cpu = wall["llmpipe TokenLoader"], cpu["llmpipe TokenLoader"]
    for name, t in wall.items():
        tps = steps * tok_per_step / t
        print(
            f"  {name:30s} {tps / 1e6:10.1f} M tokens/s  {tps * 2 / 1e9:6.2f} GB/s of uint16 tokens  "
            f"llmpipe / this = {t / base:6.2f}x   per CPU-s: {steps * tok_per_step / cpu[name] / 1e6:8.1f} M tokens "
            f"({cpu[name] / base_cpu:5.2f}x)"
        )
    print("like for like (the same dtype out; above 1: llmpipe is faster), wall and per CPU-s:")
    for bits in ("32", "64"):
        ours = "llmpipe TokenLoader" + ("" if bits == "32" else " int64")
        theirs = f"numpy memmap gather int{bits}"
        print(
            f"  int{bits}: llmpipe TokenLoader vs numpy memmap gather {wall[theirs] / wall[ours]:6.2f}x wall, "
            f"{cpu[theirs] / cpu[ours]:6.2f}x CPU"
        )


if __name__ == "__main__":
    main()
