"""Benchmark decontamination: drop every document that shares a word n-gram with an evaluation set.

N-grams are ``ngram`` (default 13, as GPT-3 and lm-eval) consecutive words after lm-eval's
decontamination normalisation (``Janitor.normalize_string``: ASCII letters lowercased, ASCII
punctuation deleted, then split on whitespace). Each evaluation set's n-grams are hashed to 64 bits
once per process, when the stage is built (one Rust call per file, the same in every worker), so a
bad evaluation file, or one that yields no n-gram (no record holds ``field``, every text shorter than
``ngram`` words), stops the run with one line before any stage runs. Each batch of documents is then
one Rust call (GIL released) that finds, per document, the first n-gram (in text order) that an
evaluation set holds. A match drops the document as
``contaminated_<set>``: ``stats.json`` counts the removals per evaluation set. An n-gram in several
sets is attributed to the first set of the config.

``mode: spans`` cuts the matching n-grams out instead of dropping the document (``CutContaminated``,
one Rust call per batch): a word's bytes are the whitespace-delimited token it comes from (its
punctuation included), matching windows that overlap or touch merge into one span, and each span is
cut from its first word's first byte to its last word's last byte (the whitespace around it stays).
A document whose every word is cut is emptied (its punctuation too) and dropped as
``empty_after_decontaminate``, as line dedup drops what it empties; the counters say how
many documents each set matched (``contaminated_<set>``, by the first match as above), and the
spans, bytes and words removed.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from llmpipe.buffers import string_buffers
from llmpipe.config import from_dict
from llmpipe.curate.stage import Filter, Mapped, Mapper
from llmpipe.curate.workdir import open_parquet
from llmpipe.errors import ConfigError
from llmpipe.io.fs import not_a_file

REASON_PREFIX = "contaminated_"
MODES = ("document", "spans")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass
class EvalSet:
    """One evaluation file: JSONL (``.jsonl``/``.json``, optionally ``.gz``, one object per line; a
    ``.json`` file may instead hold one array of objects), Parquet, or plain text (``.txt``: the whole
    file is one text)."""

    path: str
    #: the field (JSONL key, Parquet column) that holds the text; not read for .txt
    field: str = "text"


class Decontaminate(Filter):
    """Drops documents that share an n-gram with an evaluation set (see the module docstring)."""

    name: ClassVar[str] = "decontaminate"

    @dataclass
    class Config:
        enabled: bool = False
        #: name -> a file path (its texts in ``field``) or ``{path: ..., field: ...}``
        eval_sets: dict[str, Any] = dataclasses.field(default_factory=dict)
        #: words per n-gram (lm-eval's decontamination and GPT-3: 13)
        ngram: int = 13
        #: the default field of the JSONL/Parquet evaluation files
        field: str = "text"
        #: "document": drop a document that matches; "spans": cut the matching n-grams out of it
        mode: str = "document"

        def __post_init__(self) -> None:
            if self.ngram < 1:
                raise ValueError("ngram must be at least 1")
            if self.mode not in MODES:
                raise ValueError(f"mode must be 'document' or 'spans', not {self.mode!r}")
            for name, spec in self.eval_sets.items():
                if not isinstance(name, str) or not _NAME.fullmatch(name):
                    raise ValueError(f"eval_sets: {name!r} is not a name of letters, digits, '_', '.', '-'")
                if not isinstance(spec, str | dict):
                    raise ValueError(f"eval_sets.{name}: a path or {{path: ..., field: ...}}, not {spec!r}")

        def sets(self) -> dict[str, EvalSet]:
            """Each evaluation set's file and field."""
            out = {}
            for name, spec in self.eval_sets.items():
                where = f"decontaminate.eval_sets.{name}"
                out[name] = (
                    EvalSet(spec, self.field) if isinstance(spec, str) else from_dict(EvalSet, spec, where)
                )
            return out

    def __init__(self, cfg: Config) -> None:
        if not cfg.eval_sets:
            raise ValueError("eval_sets: name at least one evaluation file ({name: path})")
        self.cfg = cfg
        self.sets = cfg.sets()
        self.names = list(self.sets)
        for name, s in self.sets.items():
            if why := not_a_file(s.path):
                raise ConfigError(f"decontaminate.eval_sets.{name}: {s.path} {why}")
        _ = self.table  # each evaluation file read now: a bad one stops the run before any stage runs

    @classmethod
    def from_config(cls, cfg: Config) -> Decontaminate | CutContaminated | None:
        if not cfg.enabled:
            return None
        return CutContaminated(cls(cfg)) if cfg.mode == "spans" else cls(cfg)

    @cached_property
    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted unique n-gram hashes, the index of the first set holding each): once per process."""
        from llmpipe import _core

        hashes, owners = [], []
        for k, (name, es) in enumerate(self.sets.items()):
            texts = pa.array(list(eval_texts(name, es)), pa.large_string())
            h = np.frombuffer(_core.decont_ngram_hashes(string_buffers(texts), self.cfg.ngram), np.uint64)
            if len(h) == 0:  # it would match nothing: never a silent no-op
                field = "" if es.path.lower().endswith(".txt") else f" in field {es.field!r}"
                raise ConfigError(
                    f"decontaminate.eval_sets.{name}: {Path(es.path).expanduser()}: no text of "
                    f"{self.cfg.ngram} words or more{field} ({len(texts):,} text(s)), so no n-gram to match"
                )
            hashes.append(h)
            owners.append(np.full(len(h), k, np.int32))
        h, s = np.concatenate(hashes), np.concatenate(owners)
        order = np.lexsort((s, h))  # by hash, then set: the first set of each hash comes first
        h, s = h[order], s[order]
        first = np.ones(len(h), bool)
        first[1:] = h[1:] != h[:-1]
        return np.ascontiguousarray(h[first]), np.ascontiguousarray(s[first])

    def matches(self, text: pa.Array) -> np.ndarray:
        """Per document, the index of the evaluation set it matched, or -1: one Rust call."""
        from llmpipe import _core

        table, sets = self.table
        got = _core.decont_first_match(string_buffers(text), self.cfg.ngram, table, sets)
        return np.frombuffer(got, np.int32)

    def reasons(self, batch: pa.RecordBatch) -> list[str | None]:
        hit = self.matches(batch.column("text"))
        return [None if k < 0 else REASON_PREFIX + self.names[k] for k in hit.tolist()]


class CutContaminated(Mapper):
    """``decontaminate`` with ``mode: spans``: each document without its matching n-grams."""

    name: ClassVar[str] = Decontaminate.name
    removed_words_counter: ClassVar[str | None] = "words_removed"

    @dataclass
    class Config:  # built by Decontaminate, never from YAML
        enabled: bool = False

    def __init__(self, judge: Decontaminate) -> None:
        self.judge = judge  # the evaluation sets and their n-gram table

    @classmethod
    def from_config(cls, cfg: Config) -> None:
        return None

    def map(self, batch: pa.RecordBatch) -> Mapped:
        from llmpipe import _core

        table, sets = self.judge.table
        text = batch.column("text")
        offs, data, first, spans, nbytes = _core.decont_cut_spans(
            string_buffers(text), self.judge.cfg.ngram, table, sets
        )
        cut = np.frombuffer(memoryview(spans), np.uint32)
        changed = int(np.count_nonzero(cut))
        if changed == 0:
            return Mapped(batch, 0)
        hit = np.frombuffer(memoryview(first), np.int32)
        counters = Counter(
            {REASON_PREFIX + self.judge.names[k]: int(c) for k, c in enumerate(np.bincount(hit[hit >= 0]))}
        )
        counters["spans_removed"] = int(cut.sum())
        counters["bytes_removed"] = int(np.frombuffer(memoryview(nbytes), np.int64).sum())
        cleaned = pa.LargeStringArray.from_buffers(len(text), pa.py_buffer(offs), pa.py_buffer(data))
        if cleaned.type != text.type:
            cleaned = cleaned.cast(text.type)
        idx = batch.schema.get_field_index("text")
        return Mapped(batch.set_column(idx, "text", cleaned), changed, counters=+counters)


def eval_texts(name: str, s: EvalSet) -> Iterator[str]:
    """The texts of one evaluation file; a bad file is a ConfigError naming it and the line. A JSON
    file (``.json``, ``.json.gz``) may also be one top-level array of objects."""
    path = Path(s.path).expanduser()
    where = f"decontaminate.eval_sets.{name}: {path}"
    suffixes = [x.lower() for x in path.suffixes]
    try:
        if suffixes[-1:] == [".parquet"]:
            pf = open_parquet(path)
            if s.field not in pf.schema_arrow.names:
                raise ConfigError(f"{where}: no column {s.field!r} (columns: {pf.schema_arrow.names})")
            for batch in pf.iter_batches(columns=[s.field]):
                yield from (t for t in batch.column(0).to_pylist() if isinstance(t, str))
        elif suffixes[-1:] == [".txt"]:
            yield path.read_text("utf-8", errors="replace")
        elif ".jsonl" in suffixes or ".json" in suffixes:
            yield from _json_texts(path, where, s.field)
        else:
            raise ConfigError(f"{where}: not .jsonl, .json, .jsonl.gz, .parquet or .txt")
    except (OSError, EOFError, pa.ArrowException) as e:
        raise ConfigError(f"{where}: cannot read it ({e})") from None


def _json_texts(path: Path, where: str, field: str) -> Iterator[str]:
    """The ``field`` of each object of a JSONL file (or of a ``.json`` file's top-level array). A
    record that is not an object, a field that is not a string, and a file in which no object has
    the field are each a ConfigError: a set that matches nothing is never a silent one."""
    opener: Any = gzip.open if path.suffix.lower() == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        head = ""  # a .json file's leading whitespace and first character: "[" for one array
        if ".json" in [x.lower() for x in path.suffixes]:
            while (c := f.read(1)) and c.isspace():
                head += c
            head += c
        records: Iterator[tuple[str, Any]]
        if head.endswith("["):
            try:
                items = json.loads(head + f.read())
            except json.JSONDecodeError as e:
                raise ConfigError(f"{where}:{e.lineno}: not JSON ({e.msg})") from None
            except RecursionError:
                raise ConfigError(f"{where}: JSON nested too deeply to read") from None
            records = ((f": item {i} of its array", rec) for i, rec in enumerate(items))
        else:
            records = _json_lines(head, f, where)
        seen = 0
        keys: list[str] | None = None
        for at, rec in records:
            if not isinstance(rec, dict):
                raise ConfigError(
                    f"{where}{at}: a JSON {_kind(rec)}, not an object: JSONL is expected, one object per line "
                    f"(or a .json file of one array of objects), its text in {field!r}"
                )
            keys = list(rec) if keys is None else keys
            value = rec.get(field)
            if isinstance(value, str):
                seen += 1
                yield value
            elif value is not None:
                raise ConfigError(f"{where}{at}: field {field!r} is not a string")
    if keys is None:
        raise ConfigError(f"{where}: holds no record (JSONL: one object per line)")
    if not seen:
        raise ConfigError(
            f"{where}: no record has the field {field!r} (the first record's keys: {keys}); "
            "set field: to the key that holds the text"
        )


def _json_lines(head: str, f: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(``:N``, value) of each non-blank line N of a JSONL file whose first characters (``head``) were
    read already."""
    start = head.count("\n")
    for n, line in enumerate(f, start + 1):
        if n == start + 1:
            line = head[head.rfind("\n") + 1 :] + line
        if not line.strip():
            continue
        try:
            yield f":{n}", json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}:{n}: not JSON ({e.msg})") from None
        except RecursionError:  # as eval's reader: one line, never a traceback
            raise ConfigError(f"{where}:{n}: JSON nested too deeply to read") from None


def _kind(value: Any) -> str:
    """The JSON kind of a decoded value that is not an object."""
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else "number"
