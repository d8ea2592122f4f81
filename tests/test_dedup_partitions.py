"""Global dedup resolves through an executor: partition phases as separate pickled tasks, same drops.

A process pool stands in for the Ray cluster (every task and its arguments are pickled, two run at
once); the drops must equal the in-process resolve's exactly, for several partition counts, and a
rerun after losing some per-partition outputs (a retried task) must give them again.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dedup_corpus import Corpus, planted_corpus
from llmpipe.curate.stage import RunContext
from llmpipe.curate.stages.exact_dedup import ExactDedup, resolve_partitioned
from llmpipe.curate.stages.near_dedup import NearDedup

NO_RUN = RunContext(input_words=0)  # dedup stages do not use the run totals


class PoolExecutor:
    """Runs each call in a worker process, like Ray tasks; records (desc, count) per map."""

    workers = 2

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self.pool = pool
        self.maps: list[tuple[str, int]] = []

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str) -> list[Any]:
        self.maps.append((desc, len(args)))
        return [f.result() for f in [self.pool.submit(fn, *a) for a in args]]


@pytest.fixture(scope="module")
def pool() -> Any:
    # spawn, not fork: the parent holds Rust (rayon) and Arrow threads; tasks must pickle anyway
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as p:
        yield p


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> Corpus:
    return planted_corpus(data_dir, n_base=120, n_plain=60)


def _key_files(stage: Any, rows: list[tuple[str, str]], files: int, tmp: Path) -> list[Path]:
    tmp.mkdir(parents=True)
    per = -(-len(rows) // files)
    out = []
    for f in range(files):
        part = rows[f * per : (f + 1) * per]
        rb = pa.record_batch(
            {
                "id": [r[0] for r in part],
                "text": [r[1] for r in part],
                "source": ["x"] * len(part),
                "position": list(range(len(part))),
            }
        )
        path = tmp / f"{f:06d}.keys.parquet"
        pq.write_table(stage.prepare(rb), path)
        out.append(path)
    return out


@pytest.mark.parametrize("partition_mb", [0.01, 0.03])
def test_near_dedup_partition_tasks_match_in_process(
    corpus: Corpus, pool: ProcessPoolExecutor, tmp_path: Path, partition_mb: float
) -> None:
    stage = NearDedup(NearDedup.Config(partition_mb=partition_mb))
    rows = list(zip(corpus.ids, corpus.texts, strict=True))
    keys = _key_files(stage, rows, 3, tmp_path / "keys")
    (tmp_path / "a").mkdir()
    expected = stage.resolve(keys, tmp_path / "a", NO_RUN)
    assert expected.num_rows >= 60  # the close variants are found (some planted edits are far)

    ex = PoolExecutor(pool)
    (tmp_path / "b").mkdir()
    got = stage.resolve(keys, tmp_path / "b", NO_RUN, ex)
    assert got.equals(expected)
    descs = dict(ex.maps)
    parts = len(list((tmp_path / "b" / "groups").glob("*.parquet")))
    assert parts > 2
    assert descs == {"near_dedup shuffle": 3, "near_dedup groups": parts, "near_dedup edges": 2}

    # a retried task finds its outputs, or rewrites the lost ones: same drops
    for lost in [
        *sorted((tmp_path / "b" / "edges").glob("*.parquet"))[:2],
        tmp_path / "b" / "groups" / "00001.parquet",
    ]:
        lost.unlink()
    assert stage.resolve(keys, tmp_path / "b", NO_RUN, PoolExecutor(pool)).equals(expected)


def test_exact_dedup_hash_partitions_match_in_process(
    corpus: Corpus, pool: ProcessPoolExecutor, tmp_path: Path
) -> None:
    stage = ExactDedup(ExactDedup.Config())
    base = list(zip(corpus.ids, corpus.texts, strict=True))
    # planted copies: identical, upper-cased, and with doubled spaces (same normalised text)
    copies = [(f"copy-{j:04d}", t) for j, (_, t) in enumerate(base[:40])]
    copies += [(f"upper-{j:04d}", t.upper()) for j, (_, t) in enumerate(base[40:70])]
    copies += [(f"aspace-{j:04d}", t.replace(" ", "  ")) for j, (_, t) in enumerate(base[70:90])]
    rows = base + copies
    keys = _key_files(stage, rows, 4, tmp_path / "keys")
    (tmp_path / "a").mkdir()
    expected = stage.resolve(keys, tmp_path / "a", NO_RUN)
    # oracle: group by the normalised text (lower case, whitespace runs collapsed); all but the
    # smallest id of each group go (the corpus's unedited variants are copies too)
    groups: dict[str, list[str]] = {}
    for i, t in rows:
        groups.setdefault(" ".join(t.lower().split()), []).append(i)
    want = {d: min(ids) for ids in groups.values() for d in ids if d != min(ids)}
    assert len(want) >= 90
    assert dict(zip(expected["id"].to_pylist(), expected["dup_of"].to_pylist(), strict=True)) == want
    assert expected["id"].to_pylist() == sorted(want)

    for parts in (1, 3, 7):
        ex = PoolExecutor(pool)
        (tmp_path / f"p{parts}").mkdir()
        got = resolve_partitioned(keys, tmp_path / f"p{parts}", parts, ex)
        assert got.equals(expected), parts
        assert dict(ex.maps).get("exact_dedup groups") == parts
    # a lost partition output is recomputed on the rerun
    (tmp_path / "p7" / "drops" / "00003.parquet").unlink()
    assert resolve_partitioned(keys, tmp_path / "p7", 7, PoolExecutor(pool)).equals(expected)
