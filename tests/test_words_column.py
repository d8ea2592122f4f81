"""The words of each document travel with its batch as the ``words`` column: a stage reads the
counts the previous one handed on, a rewrite is counted again, and the work files never hold it."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from llmpipe.curate.stage import (
    WORDS,
    Mapped,
    Mapper,
    StageCounts,
    count_words,
    counted,
    with_words,
    without_words,
    word_counts,
)
from llmpipe.curate.stages.length import LengthFilter

TEXTS = ["one two three four five six", "too short", "  seven   words  are in this one  ", "x " * 9]


def _batch(texts: list[str]) -> pa.RecordBatch:
    n = len(texts)
    return pa.record_batch(
        {
            "id": [f"d{i}" for i in range(n)],
            "text": texts,
            "source": ["s"] * n,
            "position": pa.array(range(n), pa.int64()),
        }
    )


class Doubles(Mapper):
    """Repeats every text (changes them all) or, with ``same``, hands the batch on unchanged."""

    name: ClassVar[str] = "doubles"

    def __init__(self, same: bool = False) -> None:
        self.same = same

    @classmethod
    def from_config(cls, cfg: Any) -> Doubles:
        return cls()

    def map(self, batch: pa.RecordBatch) -> Mapped:
        if self.same:
            return Mapped(batch, 0)
        texts = [f"{t} {t}" for t in batch.column("text").to_pylist()]
        i = batch.schema.get_field_index("text")
        return Mapped(batch.set_column(i, "text", pa.array(texts)), batch.num_rows)


def test_counted_adds_the_column_once() -> None:
    b = _batch(TEXTS)
    assert WORDS not in b.schema.names
    with_col, words = counted(b)
    assert words.tolist() == [len(t.split()) for t in TEXTS] == word_counts(b).tolist()
    assert with_col.column(WORDS).to_pylist() == words.tolist()
    again, same = counted(with_col)  # handed on: read, not counted
    assert again is with_col and same.tolist() == words.tolist()
    # the column is what word_counts reads, whatever the text says (only the base classes write it)
    assert word_counts(with_words(b, np.full(len(TEXTS), 7))).tolist() == [7] * len(TEXTS)
    assert without_words(with_col).schema == b.schema and without_words(b) is b
    assert count_words(pa.array([], pa.string())).tolist() == []


def test_a_filter_hands_on_the_words_of_what_it_kept() -> None:
    counts = StageCounts("length")
    kept = LengthFilter(LengthFilter.Config(min_words=5)).run(_batch(TEXTS), counts)
    assert kept.column("id").to_pylist() == ["d0", "d2", "d3"]
    assert kept.column(WORDS).to_pylist() == [len(t.split()) for t in kept.column("text").to_pylist()]
    assert counts.tokens_in == sum(len(t.split()) for t in TEXTS)
    assert counts.tokens_out == sum(kept.column(WORDS).to_pylist())


def test_a_mapper_counts_what_it_rewrote_and_hands_on_what_it_did_not() -> None:
    given, words = counted(_batch(TEXTS))
    counts = StageCounts("doubles")
    out = Doubles().run(given, counts)  # the input's column is stale for the rewritten texts
    assert out.column(WORDS).to_pylist() == [2 * w for w in words.tolist()]
    assert counts.tokens_in == int(words.sum()) and counts.tokens_out == 2 * int(words.sum())
    assert counts.counters == {} and counts.modified == len(TEXTS)

    same = Doubles(same=True).run(given, StageCounts("doubles"))
    assert same.column(WORDS).to_pylist() == words.tolist()
