"""The stage contract of the curate pipeline.

A batch is a ``pyarrow.RecordBatch`` of documents with at least these columns:

    id        string   stable document id (from the input, or ``<file>:<position>``)
    text      string   the document text
    source    string   the input file it came from
    position  int64    record index within that file (order key: (source, position))

Stages may add columns (``lang``, ``lang_score``, ``quality_score`` ...); later stages keep them.

Three kinds of stage, each a small class with one job:

* ``Filter``: says, per document, keep (``None``) or drop with a reason (a short snake_case string).
* ``Mapper``: rewrites documents (same rows in, same rows out), e.g. normalisation or PII redaction;
  it may drop documents that become empty by returning reasons as well (see ``Mapper.map_with_drops``).
* ``GlobalStage``: needs every surviving document before deciding (dedup). It runs in three
  partitionable steps so the executor (local or Ray) can spread them and write to disk between them:
  ``prepare`` (map, per input batch) -> ``resolve`` (global / shuffle) -> drop the listed ids.

The base classes do the counting (documents and tokens in, out, dropped by reason, a few examples per
reason); subclasses never count. The funnel's "tokens" before tokenisation are whitespace-separated
words (``tokens_unit = "words"`` in stats.json); the tokenize stage reports real BPE tokens.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import pyarrow as pa

MAX_EXAMPLES_PER_REASON = 3
EXAMPLE_CHARS = 300

DOC_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("text", pa.string()),
        ("source", pa.string()),
        ("position", pa.int64()),
    ]
)


def word_counts(batch: pa.RecordBatch) -> np.ndarray:
    """Words per document, ``len(text.split())`` (the funnel's token unit before BPE); one Rust call."""
    if batch.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    from llmpipe import _core
    from llmpipe.buffers import string_buffers

    offsets, data = string_buffers(batch.column("text"))
    return np.frombuffer(_core.word_counts(offsets, data), dtype=np.uint32).astype(np.int64)


@dataclass
class StageCounts:
    """Documents and tokens in, out and dropped by reason, for one stage."""

    name: str
    docs_in: int = 0
    docs_out: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    dropped_tokens: Counter[str] = field(default_factory=Counter)
    modified: int = 0
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: stage-specific tallies that are not drops (e.g. PII replaced per kind, lines removed)
    counters: Counter[str] = field(default_factory=Counter)

    def add_example(self, reason: str, doc_id: str, text: str, **extra: Any) -> None:
        ex = self.examples.setdefault(reason, [])
        if len(ex) < MAX_EXAMPLES_PER_REASON:
            ex.append({"id": doc_id, "text": text[:EXAMPLE_CHARS], **extra})

    def merge(self, other: StageCounts) -> None:
        self.docs_in += other.docs_in
        self.docs_out += other.docs_out
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.dropped.update(other.dropped)
        self.dropped_tokens.update(other.dropped_tokens)
        self.modified += other.modified
        self.counters.update(other.counters)
        for reason, exs in other.examples.items():
            for ex in exs:
                mine = self.examples.setdefault(reason, [])
                if len(mine) < MAX_EXAMPLES_PER_REASON:
                    mine.append(ex)

    def check(self) -> None:
        """The funnel invariant: what came in went out or was dropped with a reason."""
        if self.docs_in != self.docs_out + sum(self.dropped.values()):
            raise AssertionError(
                f"stage {self.name}: docs_in={self.docs_in} != docs_out={self.docs_out} "
                f"+ dropped={sum(self.dropped.values())}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "dropped": dict(sorted(self.dropped.items())),
            "dropped_tokens": dict(sorted(self.dropped_tokens.items())),
            "modified": self.modified,
            "counters": dict(sorted(self.counters.items())),
            "examples": self.examples,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageCounts:
        return cls(
            name=d["name"],
            docs_in=d["docs_in"],
            docs_out=d["docs_out"],
            tokens_in=d["tokens_in"],
            tokens_out=d["tokens_out"],
            dropped=Counter(d.get("dropped", {})),
            dropped_tokens=Counter(d.get("dropped_tokens", {})),
            modified=d.get("modified", 0),
            examples=d.get("examples", {}),
            counters=Counter(d.get("counters", {})),
        )


def apply_reasons(
    batch: pa.RecordBatch,
    reasons: Sequence[str | None],
    counts: StageCounts,
    words_in: np.ndarray,
    extra_example_cols: Sequence[str] = (),
) -> pa.RecordBatch:
    """Drop the documents that have a reason, count everything, keep a few examples."""
    n = batch.num_rows
    if len(reasons) != n:
        raise ValueError(f"stage {counts.name} returned {len(reasons)} decisions for {n} documents")
    keep = np.fromiter((r is None for r in reasons), dtype=bool, count=n)
    counts.docs_in += n
    counts.tokens_in += int(words_in.sum())
    if keep.all():
        counts.docs_out += n
        counts.tokens_out += int(words_in.sum())
        return batch
    ids = batch.column("id")
    texts = batch.column("text")
    for i in np.flatnonzero(~keep).tolist():
        reason = reasons[i]
        assert reason is not None
        counts.dropped[reason] += 1
        counts.dropped_tokens[reason] += int(words_in[i])
        if len(counts.examples.get(reason, ())) < MAX_EXAMPLES_PER_REASON:
            extra = {c: batch.column(c)[i].as_py() for c in extra_example_cols}
            counts.add_example(reason, ids[i].as_py(), texts[i].as_py() or "", **extra)
    kept = batch.filter(pa.array(keep))
    counts.docs_out += kept.num_rows
    counts.tokens_out += int(words_in[keep].sum())
    return kept


class Stage(ABC):
    """A named pipeline step with one job."""

    name: ClassVar[str]
    #: the stage's YAML section: a dataclass of its options (each concrete stage defines its own)
    Config: ClassVar[type[Any]]

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: Any) -> Stage | None:
        """The stage for its parsed config section, or None when the section disables it."""


class DocStage(Stage):
    """A stage that decides per document, streaming within one input."""

    @abstractmethod
    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        """Process one batch, updating ``counts``; return the surviving documents."""


class Filter(DocStage):
    """Keep a document (``None``) or drop it with a named reason."""

    #: extra columns copied into the dropped examples (e.g. a score that explains the drop)
    example_columns: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def reasons(self, batch: pa.RecordBatch) -> Sequence[str | None]:
        """One entry per document: ``None`` to keep it, else the drop reason."""

    def annotate(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Optionally add columns (e.g. a score) before deciding; the default adds none."""
        return batch

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        batch = self.annotate(batch)
        words = word_counts(batch)
        return apply_reasons(batch, self.reasons(batch), counts, words, self.example_columns)


class Mapper(DocStage):
    """Rewrite documents; documents left empty are dropped with reason ``empty_after_<name>``."""

    @abstractmethod
    def map(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
        """Return the rewritten batch (same rows, same order) and how many documents changed."""

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        counts.docs_in += batch.num_rows
        counts.tokens_in += int(word_counts(batch).sum())
        out, changed = self.map(batch)
        if out.num_rows != batch.num_rows:
            raise ValueError(f"mapper {self.name} changed the number of rows")
        counts.modified += changed
        # Re-count on the rewritten text: an empty document is dropped with a reason.
        words = word_counts(out)
        counts.docs_in -= out.num_rows
        counts.tokens_in -= int(words.sum())  # apply_reasons adds them back: net, tokens_in = words before
        # empty = nothing but whitespace = no word (str.split and Arrow's trim share Python's isspace)
        reasons = [f"empty_after_{self.name}" if w == 0 else None for w in words.tolist()]
        return apply_reasons(out, reasons, counts, words)


class Executor(Protocol):
    """Runs ``fn(*a)`` for every ``a`` of ``args`` (here or on a cluster); results in argument order."""

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str) -> list[Any]: ...


def map_with(
    executor: Executor | None, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str
) -> list[Any]:
    """``executor.map``, or a plain loop in this process without an executor."""
    return [fn(*a) for a in args] if executor is None else executor.map(fn, args, desc)


def executor_workers(executor: Executor | None) -> int:
    """How many tasks the executor runs at once (``workers`` attribute; 1 in this process)."""
    return max(1, int(getattr(executor, "workers", 1))) if executor is not None else 1


class GlobalStage(Stage):
    """A stage that needs every surviving document of the run before it decides (dedup).

    ``prepare`` runs per batch (a map step) and returns a small table of keys, which must include
    the ``id`` column; the executor writes these tables to disk. ``resolve`` reads all of them
    (for Ray: a shuffle by key) and returns a table ``(id: string, reason: string, dup_of: string)``
    of the documents to drop. The result must not depend on input order, batching or worker count.
    ``resolve`` may run its partitionable phases through ``executor.map`` (module-level functions
    that write their outputs by atomic rename and skip them when present, so a retried task is
    safe); without an executor they run in this process.
    """

    def set_run_input_words(self, words: int) -> None:
        """Told before ``resolve``: the words the run read (its funnel's input). Most stages ignore it."""

    @abstractmethod
    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        """Per-batch keys for ``resolve`` (must include ``id``)."""

    @abstractmethod
    def resolve(self, key_files: Sequence[Path], workdir: Path, executor: Executor | None = None) -> pa.Table:
        """Decide globally: the ids to drop, with reason and the id they duplicate."""


DROPS_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("dup_of", pa.string())])
