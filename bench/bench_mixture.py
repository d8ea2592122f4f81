"""Loader throughput of a weighted mixture: 1, 2 and 5 sources against one shard directory.

The same tokens (real text from ../shared/data, UTF-8 bytes as uint16 ids) are written once as one
shard directory and again split into 2 and 5 source directories. The single directory is read by
TokenLoader, the splits by MixtureLoader with equal weights (the mixture's order, per-source counters
and the concatenated-shard gather included), one process, batches of ``--batch`` samples of
``--seq-len + 1`` ids. Reported: tokens/s and each mixture's time over the single directory's.

    python bench/bench_mixture.py [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "bench"))

from bench_loader import write_llmpipe  # noqa: E402


def corpus_tokens(limit_bytes: int) -> np.ndarray:
    with gzip.open(DATA / "reference" / "gcide.dict.gz", "rb") as f:
        raw = f.read(limit_bytes)
    return np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)


def bench_single(out: Path, batch: int, steps: int) -> float:
    from llmpipe.data import ShardDataset, TokenLoader

    it = iter(
        TokenLoader(ShardDataset(out, "train", verify="fast"), batch, seed=0, prefetch=4, doc_ids=False)
    )
    next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    return time.perf_counter() - t0


def bench_mixture(dirs: list[Path], batch: int, steps: int) -> float:
    from llmpipe.data import ShardDataset
    from llmpipe.data.loader import MixtureLoader
    from llmpipe.data.mixture import MixedShards, MixStage, MixtureOrder

    names = [d.name for d in dirs]
    shards = MixedShards(names, [ShardDataset(d, "train", verify="fast") for d in dirs])
    order = MixtureOrder(shards.mix_sources([0] * len(dirs)), [MixStage(0, (1.0,) * len(dirs))], seed=0)
    it = iter(MixtureLoader(shards, order, batch, prefetch=4, doc_ids=False))
    next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    return time.perf_counter() - t0


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
    steps = min(n // args.batch - 1, 60 if args.quick else 300)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        write_llmpipe(tmp / "one", tokens, args.seq_len)
        splits: dict[int, list[Path]] = {}
        for k in (1, 2, 5):
            parts = np.array_split(tokens, k)
            splits[k] = []
            for i, part in enumerate(parts):
                write_llmpipe(tmp / f"mix{k}" / f"s{i}", part, args.seq_len)
                splits[k].append(tmp / f"mix{k}" / f"s{i}")
        readers = {"TokenLoader, one directory": lambda: bench_single(tmp / "one", args.batch, steps)}
        for k, dirs in splits.items():
            readers[f"MixtureLoader, {k} source{'s' if k > 1 else ''}"] = lambda dirs=dirs: bench_mixture(
                dirs, args.batch, steps
            )
        results = {name: float("inf") for name in readers}
        for _ in range(args.rounds):
            for name, run in readers.items():
                results[name] = min(results[name], run())
    print(
        f"{n:,} samples of {width} uint16 ids, batch {args.batch}, {steps} steps, best of {args.rounds} rounds"
    )
    base = results["TokenLoader, one directory"]
    for name, t in results.items():
        tps = steps * args.batch * args.seq_len / t
        print(f"  {name:30s} {tps / 1e6:10.1f} M tokens/s  time / one directory's = {t / base:5.2f}x")


if __name__ == "__main__":
    main()
