"""Reading JSONL into curate batches: the compiled fast path vs the line-by-line Python reader and peers.

The corpus is bench_curate's: real paragraphs (reference books, Jargon File, GCIDE, extracted Common
Crawl pages) recombined by a seeded generator into documents of 3-40 paragraphs, ``{"id", "text"}``
per line. Sides, each reading the whole file into Arrow (the curate read step's work):

  llmpipe       ``read_input`` (blocks of lines parsed by ``_core.parse_jsonl_block``)
  line reader   ``read_input(..., jsonl_block=0)``: the per-line Python reader it replaced (the oracle)
  orjson        ``orjson.loads`` per line, text and id into ``pa.array`` per 1000 documents
  pyarrow.json  ``pyarrow.json.read_json`` of the whole file, one thread

The first two give the same batches (checked here on the whole file). CPU seconds of this process
(time.process_time), best of 3 rounds per side.

    python bench/bench_jsonl_read.py [--mb 100]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.json as pj

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_curate import paragraphs, write_corpus  # noqa: E402
from llmpipe.io.config import ReadConfig  # noqa: E402
from llmpipe.io.read import read_input  # noqa: E402


def best(fn: Callable[[], Any], rounds: int = 3) -> float:
    out = []
    for _ in range(rounds):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return min(out)


def llmpipe(path: Path, block: int) -> list[Any]:
    return list(read_input(path, "bench", ReadConfig(), jsonl_block=block))


def with_orjson(path: Path) -> int:
    n = 0
    ids: list[str] = []
    texts: list[str] = []
    with open(path, "rb") as f:
        for line in f:
            obj = orjson.loads(line)
            ids.append(obj["id"])
            texts.append(obj["text"])
            if len(texts) == 1000:
                n += len(pa.array(ids, pa.string())) + len(pa.array(texts, pa.string()))
                ids, texts = [], []
    return n + len(pa.array(texts, pa.string()))


def with_pyarrow(path: Path) -> int:
    return pj.read_json(path, read_options=pj.ReadOptions(use_threads=False, block_size=4 << 20)).num_rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-jsonl-"))
    try:
        write_corpus(tmp / "corpus", int(args.mb * 1e6), 1, paragraphs())
        path = tmp / "corpus" / "part-0000.jsonl"
        mb = path.stat().st_size / 1e6
        fast, slow = llmpipe(path, 4 << 20), llmpipe(path, 0)
        assert len(fast) == len(slow) and all(a.equals(b) for a, b in zip(fast, slow, strict=True))
        docs = sum(b.num_rows for b in fast)
        del fast, slow
        sides = {
            "llmpipe": best(lambda: llmpipe(path, 4 << 20)),
            "line reader": best(lambda: llmpipe(path, 0)),
            "orjson": best(lambda: with_orjson(path)),
            "pyarrow.json": best(lambda: with_pyarrow(path)),
        }
        print(f"{mb:.1f} MB, {docs} documents, one JSONL file")
        print(f"{'side':>14} {'CPU s':>7} {'MB/CPU-s':>9} {'llmpipe x':>10}")
        for side, cpu in sides.items():
            print(f"{side:>14} {cpu:>7.2f} {mb / cpu:>9.1f} {cpu / sides['llmpipe']:>10.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
