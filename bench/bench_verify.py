"""What the shard checks cost: open a shard directory with ``verify`` none / fast / blocks / full, then
read one epoch through the TokenLoader; start-up, epoch and total time per mode, and the ratios.

The shards hold real text (GNU dictionary from ../shared/data, UTF-8 bytes as uint16 token ids), written
``--copies`` times by the ShardWriter (so the manifest has its block checksums). The files are read once
before timing, so every mode reads them from the page cache (a cold read from disk costs every mode
that reads every byte the same extra time, and would also be paid by the first epoch). Also timed: the
block check alone done by the standard library (``zlib.crc32`` per 1 MiB block, one thread), the
independent computation the tests compare with.

    python bench/bench_verify.py [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
MODES = ("none", "fast", "blocks", "full")


def write_shards(out: Path, tokens: np.ndarray, copies: int, seq_len: int) -> int:
    from llmpipe.train.byte_shards import byte_shard_writer

    w = byte_shard_writer(out, seq_len=seq_len, val_fraction=0)
    for _ in range(copies):
        w.add_documents([tokens])
    w.close()
    return sum(p.stat().st_size for p in out.glob("*.arrow"))


def open_and_epoch(out: Path, mode: str, batch: int) -> tuple[float, float]:
    from llmpipe.data import ShardDataset, TokenLoader

    t0 = time.perf_counter()
    ds = ShardDataset(out, "train", verify=mode)  # type: ignore[arg-type]
    t1 = time.perf_counter()
    n = 0
    for b in TokenLoader(ds, batch, seed=0, infinite=False, doc_ids=False):
        n += b.input.shape[0]
    assert n == len(ds) // batch * batch
    return t1 - t0, time.perf_counter() - t1


def checks_alone(out: Path) -> dict[str, float]:
    """Each mode's check without opening the dataset: what it adds to the start-up."""
    from llmpipe.data.format import damaged_blocks, fast_fingerprint, sha256_file

    entries = json.loads((out / "manifest.json").read_text())["splits"]["train"]["shards"]
    times = {}
    for mode, check in (
        ("fast", lambda p, e: fast_fingerprint(p) == e["fast_sha256"]),
        ("blocks", lambda p, e: damaged_blocks(p, e) == []),
        ("full", lambda p, e: sha256_file(p) == e["sha256"]),
    ):
        t0 = time.perf_counter()
        assert all(check(out / e["file"], e) for e in entries)
        times[mode] = time.perf_counter() - t0
    return times


def stdlib_blocks(out: Path) -> float:
    m = json.loads((out / "manifest.json").read_text())
    t0 = time.perf_counter()
    for e in m["splits"]["train"]["shards"]:
        data = (out / e["file"]).read_bytes()
        view = memoryview(data)
        step = e["block_bytes"]
        got = [zlib.crc32(view[i : i + step]) for i in range(0, len(data), step)]
        assert got == e["block_crc32"]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--copies", type=int, default=4, help="times the text is written (~80 MB each)")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every mode; the best is kept")
    args = ap.parse_args()
    with gzip.open(DATA / "reference" / "gcide.dict.gz", "rb") as f:
        raw = f.read(4_000_000 if args.quick else None)
    tokens = np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)
    copies = 1 if args.quick else args.copies
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "shards"
        size = write_shards(out, tokens, copies, args.seq_len)
        for p in out.glob("*.arrow"):  # into the page cache
            p.read_bytes()
        best = {m: (float("inf"), float("inf")) for m in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                o, e = open_and_epoch(out, mode, args.batch)
                if o + e < sum(best[mode]):
                    best[mode] = (o, e)
        alone = {m: float("inf") for m in ("fast", "blocks", "full")}
        for _ in range(args.rounds):
            for m, t in checks_alone(out).items():
                alone[m] = min(alone[m], t)
        stdlib = min(stdlib_blocks(out) for _ in range(args.rounds))
    print(
        f"{size / 1e6:.1f} MB of shards ({len(tokens) * copies:,} uint16 tokens), batch {args.batch} x "
        f"{args.seq_len + 1}, start-up + one epoch, best of {args.rounds} rounds, page cache warm"
    )
    base = sum(best["none"])
    for mode, (o, e) in best.items():
        rate = f"{size / o / 1e9:6.2f} GB/s checked" if mode in ("blocks", "full") else " " * 18
        print(
            f"  verify={mode:6s} start-up {o:7.3f} s  {rate}  epoch {e:6.3f} s  total {o + e:7.3f} s  "
            f"{(o + e) / base:5.2f}x none"
        )
    print("the checks alone (what each adds to the start-up):")
    b = alone["blocks"]
    for m, t in alone.items():
        print(f"  {m:6s} {t:7.3f} s  {size / t / 1e9:6.2f} GB/s of shards  {t / b:5.2f}x blocks")
    print(
        f"  blocks by the standard library (zlib.crc32 per block, one thread): {stdlib:.3f} s "
        f"({size / stdlib / 1e9:.2f} GB/s), {stdlib / b:.1f}x llmpipe's blocks check"
    )


if __name__ == "__main__":
    main()
