"""Where the CPU of a curate run goes: CPU seconds (every thread of the process) per stage.

Runs ``llmpipe curate ARGS --workers 1`` in this process with each stage's entry point wrapped in a
``time.process_time`` counter (a stage's time excludes the stages it calls). One process, so that
every stage is counted; the per-input steps run the same code with more workers.

Usage: python bench/curate_stage_cpu.py CORPUS --out OUT [--config configs/curate/default.yaml]
"""

from __future__ import annotations

import collections
import functools
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import llmpipe.curate.pipeline as pipeline
import llmpipe.curate.stage as stage
import llmpipe.curate.stages.pack as pack
import llmpipe.curate.stages.tokenize as tokenize
import llmpipe.curate.steps as steps
import llmpipe.curate.workdir as workdir
from llmpipe.cli import main
from llmpipe.curate.stages.exact_dedup import ExactDedup
from llmpipe.curate.stages.extract import Extract
from llmpipe.curate.stages.near_dedup.stage import NearDedup
from llmpipe.curate.stages.pack import Pack, Packing
from llmpipe.curate.stages.read import Read
from llmpipe.curate.stages.tokenize import Tokenize, TrainTokenizer

CPU: collections.Counter[str] = collections.Counter()
STACK: list[float] = []


def _charge(label: str, t0: float) -> None:
    dt = time.process_time() - t0
    CPU[label] += dt - STACK.pop()
    if STACK:
        STACK[-1] += dt


def wrap(owner: Any, name: str, label: str | Callable[[tuple[Any, ...]], str]) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def timed(*a: Any, **k: Any) -> Any:
        lab = label(a) if callable(label) else label
        t0 = time.process_time()
        STACK.append(0.0)
        try:
            return f(*a, **k)
        finally:
            _charge(lab, t0)

    setattr(owner, name, timed)


def wrap_iter(owner: Any, name: str, label: str) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def timed(*a: Any, **k: Any) -> Iterator[Any]:
        it = f(*a, **k)
        while True:
            t0 = time.process_time()
            STACK.append(0.0)
            try:
                x = next(it)
            except StopIteration:
                _charge(label, t0)
                return
            _charge(label, t0)
            yield x

    setattr(owner, name, timed)


def install() -> None:
    wrap(stage.Filter, "run", lambda a: a[0].name)
    wrap(stage.Mapper, "run", lambda a: a[0].name)
    wrap(Extract, "run", "extract")
    wrap_iter(Read, "batches", "read")
    for writer in (workdir.AtomicParquetWriter, workdir.AtomicArrowWriter):
        wrap(writer, "write", "work files: write")
        wrap(writer, "commit", "work files: write")
    for module in (steps, tokenize, pack):  # each imported the reader by name
        wrap_iter(module, "iter_arrow", "work files: read")
    wrap(ExactDedup, "prepare", "exact_dedup hashes")
    wrap(NearDedup, "prepare", "near_dedup MinHash")
    wrap(steps.ListedDrops, "run", "global drops")
    wrap(pipeline, "resolve_global", lambda a: f"resolve global stage {a[1]}")
    wrap(TrainTokenizer, "run", "BPE training")
    wrap(Tokenize, "run", "tokenize")
    wrap(Pack, "run", "pack")
    wrap(Packing, "add", "pack")  # the run packs each input as soon as it is tokenized
    wrap(Packing, "close", "pack")
    wrap(pipeline, "write_outputs", "outputs")


if __name__ == "__main__":
    install()
    t0 = time.process_time()
    sys.argv = ["llmpipe", "curate", *sys.argv[1:], "--workers", "1", "--quiet"]
    try:
        main()
    finally:
        total = time.process_time() - t0
        print(f"{total:.2f} CPU-s after imports")
        for k, v in CPU.most_common():
            print(f"  {k:<28} {v:7.2f}  {v / total:6.1%}")
        print(f"  {'(the rest)':<28} {total - sum(CPU.values()):7.2f}")
