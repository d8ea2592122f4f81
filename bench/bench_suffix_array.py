"""Suffix-array build: llmpipe (Rust, the ``divsufsort`` crate, a port of libdivsufsort) vs
``pydivsufsort`` (libdivsufsort itself, C), on the same bytes in the same run; the arrays are
checked equal. Also times the whole substring_dedup kernel (suffix array + Kasai LCP + longest
previous match + spans) on the same bytes.

Bytes: real text (bench_curate's paragraphs: reference books, Jargon File, GCIDE, extracted CC
pages) recombined into documents joined by 0xFF, as the stage builds them.

Usage: python bench/bench_suffix_array.py [--mb 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def corpus(nbytes: int) -> bytes:
    from bench_curate import paragraphs

    paras = [p.encode() for p in paragraphs()]
    rng = random.Random(0)
    docs, size = [], 0
    while size < nbytes:
        d = b"\n\n".join(rng.choice(paras) for _ in range(rng.randint(3, 40)))
        docs.append(d)
        size += len(d) + 1
    return b"\xff".join(docs)[:nbytes]


def best(fn, repeat: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import pydivsufsort
    from llmpipe import _core

    text = corpus(int(args.mb * 1e6))
    arr = np.frombuffer(text, np.uint8).copy()  # pydivsufsort needs a writable array
    ours = np.frombuffer(_core.suffix_array(text), np.int32)
    theirs = pydivsufsort.divsufsort(arr)
    assert np.array_equal(ours, theirs.astype(np.int32)), "suffix arrays differ"
    t_ours = best(lambda: _core.suffix_array(text), args.repeat)
    t_theirs = best(lambda: pydivsufsort.divsufsort(arr), args.repeat)
    t_spans = best(lambda: _core.repeated_spans(text, 0, 200), 1)
    mb = len(text) / 1e6
    print(f"{mb:.1f} MB of real text, suffix arrays equal: yes (CPU seconds, best of {args.repeat})")
    print(f"llmpipe (divsufsort crate): {t_ours:.2f} s  {mb / t_ours:.1f} MB/s")
    print(f"pydivsufsort (libdivsufsort): {t_theirs:.2f} s  {mb / t_theirs:.1f} MB/s")
    print(f"ratio (pydivsufsort time / llmpipe time): {t_theirs / t_ours:.2f}")
    print(
        f"llmpipe substring_dedup kernel (SA + LCP + longest previous + spans): {t_spans:.2f} s  {mb / t_spans:.1f} MB/s"
    )


if __name__ == "__main__":
    main()
