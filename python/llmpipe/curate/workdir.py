"""The run's work directory: phase outputs, completion markers, and the fingerprint that guards them.

Every phase output appears by atomic rename and each per-input step writes its marker last, so a run
killed at any point and started again with the same arguments redoes only unfinished work.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import json
import os
import shutil
import signal
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from llmpipe.data.format import atomic_write_json, sha256_file
from llmpipe.errors import InputError
from llmpipe.io.fs import InputPath

WORK = ".llmpipe-work"
#: the layout of the files in it, part of the run's fingerprint (a work directory of another layout is
#: started again): 2 = documents and token ids as Arrow IPC files
WORK_LAYOUT = 2
#: results kept across runs of one --out, keyed by their content (model scores, embeddings)
CACHE = ".llmpipe-cache"
FAULT_ENV = "LLMPIPE_FAULT_AFTER"


WORKER_ENV = "LLMPIPE_WORKER"  # set in the worker processes of a local pool


def fault_point(name: str) -> None:
    """Crash-safety test hook: ``LLMPIPE_FAULT_AFTER=<name>`` SIGKILLs this process when it gets here
    (in a pool worker: the run's driver first, so the whole run dies as if the machine had)."""
    if os.environ.get(FAULT_ENV) == name:
        if os.environ.get(WORKER_ENV):
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


DELAY_ENV = "LLMPIPE_DELAY_AT"


def delay_point(name: str) -> None:
    """Fault-tolerance test hook: ``LLMPIPE_DELAY_AT=<name>:<seconds>`` sleeps when a step gets here,
    so a test can kill a cluster node while that step is surely running on it."""
    spec = os.environ.get(DELAY_ENV, "")
    where, _, seconds = spec.rpartition(":")
    if where == name:
        time.sleep(float(seconds))


def fingerprint(
    files: Sequence[InputPath], keys: list[str], config: dict[str, Any], extra: dict[str, Any]
) -> str:
    """Changes when an input, the config or a file it names (a quality model, a tokenizer) changes:
    stale work is then discarded. Inputs go by size and mtime; the files the config names, which a
    user may replace at the same path, by the sha256 of their bytes."""
    h = hashlib.sha256()
    for f, k in zip(files, keys, strict=True):
        st = f.stat()
        h.update(f"{k}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    h.update(json.dumps(config, sort_keys=True).encode())
    h.update(json.dumps(extra, sort_keys=True, default=str).encode())
    for path in config_files(config):
        h.update(f"{path}\0{sha256_file(path)}\n".encode())
    return h.hexdigest()


def config_files(config: Any) -> list[Path]:
    """Every existing file a config value names (model files, tokenizer files ...), and the files of
    a Hugging Face model directory it names (one with a config.json), sorted."""
    found: set[Path] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)
        elif isinstance(v, str) and v and len(v) < 4096 and os.path.isfile(v):
            found.add(Path(v))
        elif isinstance(v, str) and v and len(v) < 4096 and os.path.isfile(os.path.join(v, "config.json")):
            found.update(p for p in Path(v).iterdir() if p.is_file())

    walk(config)
    return sorted(found)


class WorkDir:
    """The paths of a run's intermediate results under ``OUT/.llmpipe-work`` (one place names them all)."""

    def __init__(self, out: Path, fp: str, plan: dict[str, Any] | None = None) -> None:
        """Open (or start) the work directory of the run with work fingerprint ``fp``; ``plan`` is
        kept beside it (``planned_chunk`` reads it back)."""
        self.root = out / WORK
        stamp = self.root / "fingerprint.json"
        if self.root.exists():
            try:
                old = json.loads(stamp.read_text())["fingerprint"]
            except (OSError, ValueError, KeyError, TypeError):  # damaged: started over
                old = None
            if old != fp:
                shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        if not stamp.exists():
            atomic_write_json(stamp, {"fingerprint": fp, **(plan or {})})

    @staticmethod
    def planned_chunk(out: Path, run: str) -> int | None:
        """The chunk size an earlier, unfinished run of the same job (fingerprint ``run``) planned."""
        try:
            plan = json.loads((out / WORK / "fingerprint.json").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(plan, dict):
            return None
        size = plan.get("chunk_bytes") if plan.get("run") == run else None
        return size if isinstance(size, int) and size > 0 else None

    @classmethod
    def open(cls, root: Path) -> WorkDir:
        """An existing work directory (in a worker: the driver already checked the fingerprint)."""
        self = cls.__new__(cls)
        self.root = root
        return self

    def seg(self, k: int) -> Path:
        d = self.root / f"seg{k}"
        d.mkdir(exist_ok=True)
        return d

    def docs(self, k: int, i: int) -> Path:
        """Input ``i``'s documents after segment ``k`` (Arrow IPC: :class:`AtomicArrowWriter`)."""
        return self.seg(k) / f"{i:06d}.arrow"

    def keys(self, g: int, i: int) -> Path:
        """Input ``i``'s keys for global stage ``g`` (written by the segment that prepares them)."""
        d = self.root / f"keys{g}"
        d.mkdir(exist_ok=True)
        return d / f"{i:06d}.keys.parquet"  # a stage may keep files beside it (classifier scores)

    def marker(self, k: int, i: int) -> Path:
        return self.seg(k) / f"{i:06d}.done.json"

    def quarantine(self, i: int) -> Path:
        """Input ``i``'s quarantined records (JSON lines), written by its read step."""
        return self.seg(0) / f"{i:06d}.quarantine.jsonl"

    def drops(self, k: int) -> Path:
        return self.root / f"global{k}.drops.parquet"

    def global_dir(self, k: int) -> Path:
        d = self.root / f"global{k}"
        d.mkdir(exist_ok=True)
        return d

    def tokens(self, i: int) -> Path:
        d = self.root / "tokens"
        d.mkdir(exist_ok=True)
        return d / f"{i:06d}.arrow"

    def tokens_marker(self, i: int) -> Path:
        return self.tokens(i).with_suffix(".done.json")

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer.json"

    @property
    def staging(self) -> Path:
        """Where the shards are written before they move into the output directory."""
        return self.root / "shards"

    def remove(self) -> None:
        # The stamp goes first: a kill half-way through rmtree must not leave markers whose outputs
        # are gone behind a valid stamp (a re-run then discards the remains and starts over).
        (self.root / "fingerprint.json").unlink(missing_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)


def temp_path(path: Path) -> Path:
    """The temporary name an output is written under before its rename onto ``path``: hidden, beside
    it (same file system, so the rename is atomic), and per process (two tries never share one)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s content to: renamed onto ``path`` when the block ends,
    removed when it raises (parent directories are made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


#: string columns of work files whose values are (nearly) all distinct: a dictionary would only be
#: built, paid for and given up on (Parquet falls back to plain encoding once it is large)
DISTINCT_COLUMNS = frozenset({"id", "text", "dup_of"})


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` worth a Parquet dictionary: strings that repeat (source, lang,
    reason, meta). Numbers, binary (shingles), lists (bands, tokens), texts and ids are written plain."""
    return [
        f.name
        for f in schema
        if f.name not in DISTINCT_COLUMNS and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
    ]


#: work files are written once and read once or twice, on the same machine: zstd (level 1) cost a
#: curate run ~4% of its CPU to write and read them (most of their cost), for half their size on disk
WORK_COMPRESSION = "none"


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """``table`` as one Parquet file at ``path``, which appears whole or not at all."""
    with atomic_path(path) as tmp:
        pq.write_table(
            table, tmp, compression=WORK_COMPRESSION, use_dictionary=dictionary_columns(table.schema)
        )


class _NoPandas(importlib.abc.MetaPathFinder):
    """While installed, ``import pandas`` fails as if it were not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def pyarrow_without_pandas() -> None:
    """Make pyarrow's lazy pandas check find no pandas, once, without importing it.

    pyarrow imports pandas (~0.3 CPU-s, as much as numpy and pyarrow together) the first time a call
    asks whether its argument is a pandas object, and nearly every call asks: ``pa.array`` of a list
    or of a numpy array, ``to_numpy`` of some arrays. A curate run never hands pyarrow a pandas
    object, so the processes of ``llmpipe curate`` (its driver, every pool worker) answer once, before
    anything else asks. pyarrow keeps the answer for those checks only: ``to_pandas``/``from_pandas``
    still import pandas and work. Nothing changes when pandas is imported already or pyarrow has
    looked for it."""
    if "pandas" in sys.modules:
        return
    block = _NoPandas()
    sys.meta_path.insert(0, block)
    try:
        pa.array([0])  # pyarrow's first pandas check: it finds none and remembers
    finally:
        sys.meta_path.remove(block)


def open_parquet(path: Path | str) -> pq.ParquetFile:
    """A Parquet file opened to be read a row group at a time, ``pre_buffer`` off.

    With pyarrow's default (on), ``iter_batches`` first reads the column chunks of every row group
    it will visit into one cache, which lives until the reader is done: streaming a part's work file
    held the whole compressed file. A curate worker reading a 120 MB part's documents (55 MB of
    Parquet) grew from 50 to 102 MB resident that way; off, it holds the row group it reads."""
    return pq.ParquetFile(path, pre_buffer=False)


def read_parquet(path: Path | str, columns: Sequence[str] | None = None) -> pa.Table:
    """One Parquet file as a table (``pq.read_table`` of one file without pyarrow.dataset, whose
    import costs each process ~0.4 CPU-s: it imports pandas)."""
    with open_parquet(path) as f:
        return f.read(columns=list(columns) if columns is not None else None)


class _AtomicWriter(ABC):
    """Appends batches to a temporary file; ``commit`` renames it onto ``path``, ``abort`` removes it.
    As a context manager it aborts when the block raises (``commit`` stays explicit).

    ``schema``: the file's schema (default: the first batch's; other batches are cast to it)."""

    def __init__(self, path: Path, schema: pa.Schema | None = None) -> None:
        self.path = path
        self.tmp = temp_path(path)
        self.schema = schema
        self.is_open = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self.abort()

    @abstractmethod
    def _open(self, schema: pa.Schema) -> None:
        """Start the format's file at ``self.tmp``."""

    @abstractmethod
    def _append(self, table: pa.Table) -> None:
        """Add rows to the open file."""

    @abstractmethod
    def _close(self) -> None:
        """Finish the open file and close it."""

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not self.is_open:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.schema is None:
                self.schema = batch.schema
            self._open(self.schema)
            self.is_open = True
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        self._append(batch.cast(self.schema) if batch.schema != self.schema else batch)

    def commit(self, empty_schema: pa.Schema | None = None) -> None:
        """Rename the file into place; with no batch written, an empty file of ``empty_schema``
        (default: the writer's schema)."""
        if not self.is_open:
            schema = empty_schema if empty_schema is not None else self.schema
            if schema is None:
                raise ValueError(f"{self.path}: nothing written and no schema for an empty file")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._open(schema)
        self.is_open = False
        self._close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        """Drop what was written: no temporary file is left behind."""
        if self.is_open:
            self.is_open = False
            self._close()
        self.tmp.unlink(missing_ok=True)


class AtomicParquetWriter(_AtomicWriter):
    """A Parquet file written whole or not at all (the work files of keys, drops and partitions)."""

    def _open(self, schema: pa.Schema) -> None:
        self.writer = pq.ParquetWriter(
            self.tmp, schema, compression=WORK_COMPRESSION, use_dictionary=dictionary_columns(schema)
        )

    def _append(self, table: pa.Table) -> None:
        self.writer.write_table(table)

    def _close(self) -> None:
        self.writer.close()


class AtomicArrowWriter(_AtomicWriter):
    """An Arrow IPC file written whole or not at all: the documents between segments and the token
    ids between tokenize and pack, the largest work files. They are written and read back as Arrow's
    own buffers, with no Parquet encoding either way. Replaying a 0.4 GB run's traffic of them,
    Parquet took 2.5x the CPU of these files read with :func:`iter_arrow`'s validation (1.43 against
    0.58 CPU-s, ``bench/bench_work_files.py``); the whole run took ~6% less CPU and ~25% fewer page
    faults with Arrow IPC."""

    def _open(self, schema: pa.Schema) -> None:
        # the file is opened here and closed in _close: pyarrow's writer leaves a file it opened
        # itself open after its close, until it is collected
        self.sink = pa.OSFile(str(self.tmp), "wb")
        self.writer = ipc.new_file(self.sink, schema)

    def _append(self, table: pa.Table) -> None:
        for batch in table.to_batches():
            self.writer.write_batch(batch)

    def _close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.sink.close()


def iter_arrow(
    path: Path | str, batch_size: int | None = None, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """The batches of an Arrow IPC work file, one written batch read at a time (not memory-mapped:
    a mapped file's pages would count in the reader's memory until it closed), sliced to at most
    ``batch_size`` rows, with only ``columns`` (default: all).

    A work file is read as data: each batch is checked whole (offsets within their buffers, UTF-8;
    ~0.1 ms per MB) before anything uses it, and a damaged one is an :class:`InputError`."""
    try:
        with pa.OSFile(str(path)) as f:
            reader = ipc.open_file(f)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                batch.validate(full=True)
                yield from _slices(batch, batch_size, columns)
    except pa.ArrowInvalid as e:
        raise InputError(
            f"{path}: a damaged work file ({e}); remove {WORK} under --out to start over"
        ) from None


def _slices(
    batch: pa.RecordBatch, batch_size: int | None, columns: Sequence[str] | None
) -> Iterator[pa.RecordBatch]:
    if columns is not None:
        batch = batch.select(list(columns))
    step = batch_size or max(batch.num_rows, 1)
    for at in range(0, batch.num_rows, step):
        yield batch.slice(at, step)
