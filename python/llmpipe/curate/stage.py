"""The stage contract of the curate pipeline.

A batch is a ``pyarrow.RecordBatch`` of documents with at least these columns:

    id        string   stable document id (from the input, or ``<file>:<position>``)
    text      string   the document text
    source    string   the input file it came from
    position  int64    record index within that file (order key: (source, position))

Stages may add columns (``lang``, ``lang_score``, ``quality_score`` ...); later stages keep them.
The base classes add ``words`` (int64, the words of ``text``): a stage hands its batch on with the
words of what it kept, so the next one does not count them again (``word_counts`` reads them).

Three kinds of stage, each a small class with one job:

* ``Filter``: says, per document, keep (``None``) or drop with a reason (a short snake_case string).
* ``Mapper``: rewrites documents (same rows in, same rows out), e.g. normalisation, extraction, PII
  redaction or C4's line cleaning; it returns a ``Mapped``: the new batch, how many documents changed,
  optional drop reasons and tallies. Documents left without a word are dropped as ``empty_after_<name>``.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from llmpipe.curate.executors import Executor

MAX_EXAMPLES_PER_REASON = 3
EXAMPLE_CHARS = 300


#: the column of each document's words (``len(text.split())``) that a stage hands on with its batch,
#: so the next stage reads them instead of counting again. Only the base classes write it (``counted``
#: and a mapper's recount of what it rewrote); the work files are written without it.
WORDS = "words"


def count_words(text: pa.Array) -> np.ndarray:
    """Words of each text, ``len(text.split())`` (the funnel's token unit before BPE): one Rust call."""
    if len(text) == 0:
        return np.zeros(0, dtype=np.int64)
    from llmpipe import _core
    from llmpipe.buffers import string_buffers

    offsets, data = string_buffers(text)
    return np.frombuffer(_core.word_counts(offsets, data), dtype=np.uint32).astype(np.int64)


def word_counts(batch: pa.RecordBatch) -> np.ndarray:
    """Words per document: the batch's ``words`` column when a stage handed it on, else counted."""
    if WORDS in batch.schema.names:
        return batch.column(WORDS).to_numpy()
    return count_words(batch.column("text"))


def with_words(batch: pa.RecordBatch, words: np.ndarray) -> pa.RecordBatch:
    """``batch`` with ``words`` (the words of its text column, one per row) as its ``words`` column."""
    col = pa.array(words, pa.int64())
    i = batch.schema.get_field_index(WORDS)
    return batch.set_column(i, WORDS, col) if i >= 0 else batch.append_column(WORDS, col)


def counted(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, np.ndarray]:
    """``batch`` with its ``words`` column (counted now unless a stage handed it on), and the counts."""
    if WORDS in batch.schema.names:
        return batch, batch.column(WORDS).to_numpy()
    words = count_words(batch.column("text"))
    return with_words(batch, words), words


def without_words(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` as it is written to the work files: without the ``words`` column."""
    return batch.drop_columns([WORDS]) if WORDS in batch.schema.names else batch


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
    words_out: np.ndarray | None = None,
) -> pa.RecordBatch:
    """Drop the documents that have a reason, count everything, keep a few examples.

    ``words_in`` are each document's tokens as it came in (a drop takes those); ``words_out`` (default:
    the same) its tokens as it goes on, for a step that changes them (a mapper, the tokenizer)."""
    n = batch.num_rows
    if len(reasons) != n:
        raise ValueError(f"stage {counts.name} returned {len(reasons)} decisions for {n} documents")
    keep = np.fromiter((r is None for r in reasons), dtype=bool, count=n)
    out_words = words_in if words_out is None else words_out
    counts.docs_in += n
    counts.tokens_in += int(words_in.sum())
    if keep.all():
        counts.docs_out += n
        counts.tokens_out += int(out_words.sum())
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
    counts.tokens_out += int(out_words[keep].sum())
    return kept


class Stage(ABC):
    """A named pipeline step with one job."""

    name: ClassVar[str]
    #: the stage's YAML section: a dataclass of its options (each concrete stage defines its own)
    Config: ClassVar[type[Any]]

    @classmethod
    def parse_config(cls, data: Any, where: str) -> Any:
        """The stage's ``Config`` from its YAML section (a mapping, or None for the defaults); a stage
        whose section takes another shape (a list) overrides this."""
        from llmpipe.config import from_dict
        from llmpipe.errors import ConfigError

        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping of options")
        return from_dict(cls.Config, data or {}, where)

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
        batch, words = counted(self.annotate(batch))  # the kept rows hand their words on
        return apply_reasons(batch, self.reasons(batch), counts, words, self.example_columns)


@dataclass
class Mapped:
    """What a mapper returns for one batch."""

    batch: pa.RecordBatch  # the rewritten documents: same rows, same order
    changed: int  # how many documents it changed (0: every text is the one it was given)
    reasons: Sequence[str | None] | None = None  # documents it drops, with their reason
    counters: Counter[str] = field(default_factory=Counter)  # tallies that are not drops


class Mapper(DocStage):
    """Rewrite documents; documents left without a word are dropped as ``empty_after_<name>``.

    Counting: tokens in are each document's words before (``words_before``), tokens out the words of
    the kept documents after; a document the mapper itself drops takes its words before. When
    ``removed_words_counter`` is set, the words the rewrite removed from kept documents go there.
    """

    removed_words_counter: ClassVar[str | None] = None

    @abstractmethod
    def map(self, batch: pa.RecordBatch) -> Mapped:
        """Rewrite one batch."""

    def words_before(self, batch: pa.RecordBatch) -> np.ndarray:
        """Each document's tokens as it comes in (the words of its text unless a mapper says otherwise)."""
        return word_counts(batch)

    def rewritten(self, batch: pa.RecordBatch) -> np.ndarray | None:
        """The rows this mapper may have emptied (None: all); only those can be ``empty_after_<name>``."""
        return None

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        before = self.words_before(batch)
        judged = self.rewritten(batch)
        m = self.map(batch)
        if m.batch.num_rows != batch.num_rows:
            raise ValueError(f"mapper {self.name} changed the number of rows")
        # a mapper that changed no text hands on the words it was given; a rewrite is counted again
        after = word_counts(batch) if m.changed == 0 else count_words(m.batch.column("text"))
        out = with_words(m.batch, after)
        given = m.reasons if m.reasons is not None else [None] * batch.num_rows
        # empty = nothing but whitespace = no word (str.split and Arrow's trim share Python's isspace)
        empty = (after == 0) if judged is None else (after == 0) & judged
        reasons = [
            r if r is not None else f"empty_after_{self.name}" if e else None
            for r, e in zip(given, empty.tolist(), strict=True)
        ]
        mine = np.fromiter((r is not None for r in given), dtype=bool, count=len(given))
        words_in = np.where(mine, before, after)  # a drop for emptiness takes the (zero) words after
        kept = apply_reasons(out, reasons, counts, words_in, words_out=after)
        counts.tokens_in += int(before.sum() - words_in.sum())  # tokens in: the words before, all rows
        counts.modified += m.changed
        counts.counters.update(m.counters)
        if self.removed_words_counter is not None:
            keep = np.fromiter((r is None for r in reasons), dtype=bool, count=len(reasons))
            counts.counters[self.removed_words_counter] += int(before[keep].sum() - after[keep].sum())
        return kept


@dataclass(frozen=True)
class RunContext:
    """What a global stage may know of the whole run when it resolves."""

    input_words: int  # the words the run read: its funnel's input
    #: a directory kept across runs of the same --out for results keyed by their content (model
    #: scores, embeddings), so a re-run or a threshold sweep does not compute them again
    cache: Path | None = None
    #: drop lists (``DROPS_SCHEMA`` parquet files) of the global stages resolved just before this one
    #: whose documents' keys are still in its key files (the keys were prepared in the same segment):
    #: only given to a stage that ``ignores_dropped``, which decides as if those documents were absent
    dropped: tuple[Path, ...] = ()


class GlobalStage(Stage):
    """A stage that needs every surviving document of the run before it decides (dedup).

    ``prepare`` runs per batch (a map step) and returns a small table of keys, which must include
    the ``id`` column; the executor writes these tables to disk. ``resolve`` reads all of them
    (for Ray: a shuffle by key) and returns a table ``(id: string, reason: string, dup_of: string)``
    of the documents to drop. The result must not depend on input order, batching or worker count.
    ``run`` tells it what it may need of the whole run (the words read, for a retention target).
    ``resolve`` may run its partitionable phases through ``executor.map`` (module-level functions
    that write their outputs by atomic rename and skip them when present, so a retried task is
    safe); without an executor they run in this process.
    """

    @abstractmethod
    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        """Per-batch keys for ``resolve`` (must include ``id``)."""

    @abstractmethod
    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        """Decide globally: the ids to drop, with reason and the id they duplicate."""

    #: ``resolve`` honours ``RunContext.dropped``, so its keys may be prepared in the same segment as
    #: the keys of the drop-only global stage before it, on the documents that stage may still drop
    #: (saving a pass over the documents that would only apply that stage's drops)
    ignores_dropped: ClassVar[bool] = False

    def annotate(self, batch: pa.RecordBatch, key_file: Path, counts: StageCounts) -> pa.RecordBatch:
        """Columns the resolve computed for the documents of ``batch`` (whose keys were ``key_file``),
        added before the drops apply (a model's scores); may tally ``counts.counters``. Default: none."""
        return batch


class GlobalRewrite(GlobalStage):
    """A global stage that rewrites documents instead of dropping them (line and substring dedup).

    ``resolve`` writes what it decided under its work directory and returns no drops; ``rewriter``
    then gives the mapper that the next segment runs first on every document (counted under this
    stage's name; documents it empties are dropped as ``empty_after_<name>``)."""

    @abstractmethod
    def rewriter(self, resolved: Path, key_file: Path) -> DocStage:
        """The mapper that applies the decisions ``resolve`` wrote under ``resolved`` to the
        documents whose keys were ``key_file`` (one input part: it may load only that part's)."""


DROPS_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("dup_of", pa.string())])
#: a tokenized part: each kept document's ids and its words
TOKENS_SCHEMA = pa.schema([("tokens", pa.large_list(pa.uint32())), ("words", pa.int64())])
