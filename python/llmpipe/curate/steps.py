"""The per-input steps of a curate run: plain functions of a ``Job`` that any executor can run.

    segment k, input i : (read -> extract, or the drops of global stage k-1) -> doc stages -> keys
    resolve k          : global stage k decides over every input's keys -> its drop list
    tokenize, input i  : the last segment's documents -> token ids

Each step writes its outputs and then its completion marker by atomic rename under the work
directory, and returns (and stores) the marker: a step whose marker exists is done, so a re-run, a
retried Ray task or a resumed run redoes only unfinished work and writes the same bytes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmpipe.curate.executors import Executor
from llmpipe.curate.quarantine import QuarantineWriter
from llmpipe.curate.settings import CurateConfig
from llmpipe.curate.stage import (
    DocStage,
    GlobalRewrite,
    GlobalStage,
    RunContext,
    StageCounts,
    apply_reasons,
    counted,
    without_words,
)
from llmpipe.curate.stages.extract import Extract
from llmpipe.curate.stages.read import Read
from llmpipe.curate.stages.tokenize import Tokenize
from llmpipe.curate.workdir import (
    AtomicArrowWriter,
    AtomicParquetWriter,
    WorkDir,
    delay_point,
    fault_point,
    iter_arrow,
    read_parquet,
    write_table_atomic,
)
from llmpipe.data.format import atomic_write_json
from llmpipe.errors import InputError
from llmpipe.io.chunks import Span
from llmpipe.io.config import ReadConfig
from llmpipe.io.fs import InputPath, as_input
from llmpipe.io.read import detect_format
from llmpipe.io.records import DOC_SCHEMA, Bad

DOCS_SCHEMA = DOC_SCHEMA.append(pa.field("meta", pa.string()))


@dataclass(frozen=True)
class Part:
    """One unit of per-input work: a whole input file, one chunk of a large one, or a run of small
    whole files (``count`` > 1), so per-step costs (work files, markers, tasks) are per part, not per
    file. Documents, ids and outputs do not depend on how inputs are grouped into parts."""

    file: int  # index into ``Job.files`` (the first file of a group)
    span: Span | None  # None: the whole file
    chunk: int = 0  # the chunk's number within its file
    size: int = 0  # bytes of input it covers (for progress)
    count: int = 1  # whole files ``file .. file + count - 1`` (a group has no span)

    def pieces(self) -> list[tuple[int, Span | None, int]]:
        """(file, span, chunk) of each input piece of the part, in input order."""
        if self.count == 1:
            return [(self.file, self.span, self.chunk)]
        return [(f, None, 0) for f in range(self.file, self.file + self.count)]


@dataclass(frozen=True, slots=True)
class Job:
    """Everything a per-input step needs; small and picklable. Steps take a part's index ``i``."""

    config: CurateConfig  # parsed once by the driver, handed to every step as it is
    work_root: str
    files: tuple[str, ...]
    keys: tuple[str, ...]
    strict: bool
    parts: tuple[Part, ...]
    #: the config's sha256, computed once by the driver: a process builds the stages once per key
    config_key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "config_key", self.config.sha256())


@dataclass
class Segment:
    """The document stages between two global stages."""

    doc_stages: list[DocStage]
    #: the global stages (by their number in the run) whose keys this segment prepares, resolved in
    #: this order: several only when each later one ``ignores_dropped`` of the ones before it
    ends_with: list[tuple[int, GlobalStage]]
    #: the global stages whose drops (or rewrites) this segment applies first, in this order
    after: list[tuple[int, GlobalStage]]


#: the stages each config built in this process, by ``Job.config_key`` (the last few configs)
_BUILT: dict[str, list[Any]] = {}


def stages_of(job: Job) -> list[Any]:
    """The job's stages, built once per process (not once per part)."""
    return built_stages(job.config, job.config_key)


def built_stages(config: CurateConfig, key: str | None = None) -> list[Any]:
    """The stages of ``config`` (key: its sha256), built once per process; building them checks
    what the config names (model and list files, options), so a driver builds them before it makes
    the output directory."""
    key = key or config.sha256()
    stages = _BUILT.get(key)
    if stages is None:
        if len(_BUILT) >= 8:
            del _BUILT[next(iter(_BUILT))]
        stages = _BUILT[key] = config.build_stages()
    return stages


def before_extract(stages: Sequence[Any]) -> list[DocStage]:
    """The stages that run between the reader and extraction (``before_extract``: the URL filter)."""
    return [st for st in stages if getattr(st, "before_extract", False)]


def segments_of(stages: Sequence[Any]) -> list[Segment]:
    """The run's segments. A global stage that directly follows another (no document stage between)
    which only drops documents joins its segment when it can ignore that one's drops at resolve
    (``ignores_dropped``): its keys are prepared on the same pass, and no pass applies the first
    stage's drops alone. The outputs are the same either way."""
    segs: list[Segment] = []
    current: list[DocStage] = []
    after: list[tuple[int, GlobalStage]] = []
    g = 0
    for st in stages:
        if not isinstance(st, GlobalStage):
            current.append(st)
            continue
        if not current and segs and st.ignores_dropped and all(_drops_only(p) for _, p in segs[-1].ends_with):
            segs[-1].ends_with.append((g, st))
        else:
            segs.append(Segment(current, [(g, st)], after))
            current, after = [], segs[-1].ends_with
        g += 1
    segs.append(Segment(current, [], after))
    return segs


def _drops_only(st: GlobalStage) -> bool:
    """The stage only drops documents: it neither rewrites them nor adds columns to them."""
    return not isinstance(st, GlobalRewrite) and type(st).annotate is GlobalStage.annotate


class ListedDrops:
    """Drops the documents a global stage listed (counted under that stage's name)."""

    def __init__(self, drops: dict[str, str]) -> None:
        self.drops = drops

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        reasons = [self.drops.get(x) for x in batch.column("id").to_pylist()]
        batch, words = counted(batch)
        return apply_reasons(batch, reasons, counts, words)


@lru_cache(maxsize=2)
def _load_drops(path: str) -> dict[str, str]:
    t = read_parquet(path, columns=["id", "reason"])
    return dict(zip(t.column("id").to_pylist(), t.column("reason").to_pylist(), strict=True))


def _source_batches(
    job: Job,
    work: WorkDir,
    k: int,
    i: int,
    seg: Segment,
    counts: list[StageCounts],
    bad: QuarantineWriter,
) -> Iterator[pa.RecordBatch]:
    """Segment 0 reads and extracts the input (the stages that run before extraction in between); a
    later one starts from the previous one's documents."""
    if k == 0:
        read, extract = StageCounts(Read.name), StageCounts(Extract.name)
        pre = [(st, StageCounts(st.name)) for st in before_extract(seg.doc_stages)]
        counts += [read, *(c for _, c in pre), extract]
        cfg = job.config.read
        for f, span, _ in job.parts[i].pieces():
            path, key = job.files[f], job.keys[f]
            bad.source = key

            def on_bad(b: Bad, path: str = path) -> None:
                if job.strict:
                    raise InputError(f"{path}: {b.location}: {b.reason} ({b.detail}) [--strict]")
                bad.add(b)

            yield from read_documents(as_input(path), key, cfg, on_bad, read, extract, span, pre)
        return
    assert seg.after
    steps: list[tuple[GlobalStage, DocStage | ListedDrops, Path, StageCounts]] = []
    for g, st in seg.after:
        key_file = work.keys(g, i)
        if isinstance(st, GlobalRewrite):  # rewrites documents (line, substring dedup)
            step: DocStage | ListedDrops = st.rewriter(work.global_dir(g), key_file)
        else:
            step = ListedDrops(_load_drops(str(work.drops(g))))
        steps.append((st, step, key_file, StageCounts(st.name)))
    counts += [c for *_, c in steps]
    for batch in iter_arrow(work.docs(k - 1, i), batch_size=1000):
        for st, step, key_file, c in steps:
            batch = step.run(st.annotate(batch, key_file, c), c)
            if not batch.num_rows:
                break
        else:
            yield batch


#: a coalesced batch holds at most this many bytes of text (and ``read.batch_size`` documents)
COALESCE_BYTES = 16 << 20


def coalesce(batches: Iterator[pa.RecordBatch], rows: int, nbytes: int) -> Iterator[pa.RecordBatch]:
    """The same documents in the same order, small batches (one per tiny input of a part) joined up
    to ``rows`` documents or ``nbytes`` of text: a stage's call costs once per batch, not per file."""
    buf: list[pa.RecordBatch] = []
    n = size = 0

    def flush() -> pa.RecordBatch:
        joined = buf[0] if len(buf) == 1 else pa.concat_batches(buf)
        buf.clear()
        return joined

    for batch in batches:
        if buf and batch.schema != buf[0].schema:
            yield flush()
            n = size = 0
        buf.append(batch)
        n += batch.num_rows
        size += batch.column("text").nbytes
        if n >= rows or size >= nbytes:
            yield flush()
            n = size = 0
    if buf:
        yield flush()


def read_documents(
    path: InputPath,
    source: str,
    cfg: ReadConfig,
    on_bad: Callable[[Bad], None],
    read: StageCounts | None = None,
    extract: StageCounts | None = None,
    span: Span | None = None,
    pre: Sequence[tuple[DocStage, StageCounts]] = (),
) -> Iterator[pa.RecordBatch]:
    """The start of every run: read -> extract on one input (one chunk of it), counted in ``read``
    and ``extract``; ``pre``: stages (with their counts) that run between the two (the URL filter)."""
    read = read if read is not None else StageCounts(Read.name)
    extract = extract if extract is not None else StageCounts(Extract.name)
    step = Extract(cfg)
    for batch in Read(cfg, on_bad).batches(path, source, read, span):
        for st, c in pre:
            batch = st.run(batch, c)
        kept = step.run(batch, extract) if batch.num_rows else batch
        if kept.num_rows:
            yield kept


def ready() -> None:
    """Nothing: a pool worker that runs it has imported this module, and with it pyarrow, the stages
    and the Rust core (``PoolExecutor.start``)."""


def map_segment(job: Job, k: int, i: int) -> dict[str, Any]:
    """Run segment ``k`` on input ``i``; returns (and stores) the marker: counts and quarantined records."""
    work = WorkDir.open(Path(job.work_root))
    marker = work.marker(k, i)
    if marker.exists():
        return json.loads(marker.read_text())
    delay_point(f"segment {k}")
    segs = segments_of(stages_of(job))
    seg = segs[k]
    counts: list[StageCounts] = []
    bad = QuarantineWriter(work.quarantine(i), job.keys[job.parts[i].file])  # source: set per piece
    doc_stages = [st for st in seg.doc_stages if k > 0 or st not in before_extract(seg.doc_stages)]
    stage_counts = [StageCounts(s.name) for s in doc_stages]
    docs_out = AtomicArrowWriter(work.docs(k, i))
    keys_out = [(gs, AtomicParquetWriter(work.keys(g, i))) for g, gs in seg.ends_with]
    rows = job.config.read.batch_size
    sample_bytes = 0
    for batch in coalesce(_source_batches(job, work, k, i, seg, counts, bad), rows, COALESCE_BYTES):
        for st, c in zip(doc_stages, stage_counts, strict=True):
            batch = st.run(batch, c)
            if batch.num_rows == 0:
                break
        if batch.num_rows == 0:
            continue
        if k == len(segs) - 1:  # the documents a tokenizer trains on
            sample_bytes += sample_size(batch.column("text"))
        docs_out.write(without_words(batch))
        for gs, out in keys_out:
            out.write(gs.prepare(batch))
    fault_point(f"segment {k}#{i} written")  # outputs complete, not yet renamed into place
    docs_out.commit(DOCS_SCHEMA)
    for _, out in keys_out:
        out.commit(pa.schema([("id", pa.string())]))
    if k == 0:
        bad.commit()
    fault_point(f"segment {k}#{i} committed")  # outputs in place, marker not yet written
    result = {
        "counts": [c.to_dict() for c in counts + stage_counts],
        "quarantine": dict(bad.by_reason),  # the records are in work.quarantine(i)
        # an input's format is counted once, by its first chunk
        "formats": [detect_format(as_input(job.files[f])) for f, _, c in job.parts[i].pieces() if c == 0]
        if k == 0
        else [],
        # (last segment) what these documents add to a tokenizer training sample (``TrainTokenizer``):
        # the driver trains as soon as the parts done in input order hold the whole sample
        "sample_bytes": sample_bytes,
    }
    atomic_write_json(marker, result)
    return json.loads(marker.read_text())  # exactly what a resumed run reads: same bytes out


def sample_size(text: pa.Array | pa.ChunkedArray) -> int:
    """Bytes of ``text`` in a tokenizer training sample: each document's UTF-8 text and a newline (a
    null text: the newline)."""
    return int(pc.sum(pc.binary_length(text)).as_py() or 0) + len(text)


def globals_of(stages: Sequence[Any]) -> list[GlobalStage]:
    """The run's global stages, numbered as the work directory numbers them."""
    return [st for st in stages if isinstance(st, GlobalStage)]


def resolve_global(job: Job, g: int, run: RunContext, executor: Executor | None = None) -> None:
    """Run global stage ``g``'s resolve here; its partition phases go through ``executor`` (Ray tasks)."""
    work = WorkDir.open(Path(job.work_root))
    if work.drops(g).exists():
        return
    stage = globals_of(stages_of(job))[g]
    shutil.rmtree(work.global_dir(g))  # leftovers of a killed resolve are not inputs to this one
    files = [work.keys(g, i) for i in range(len(job.parts))]
    drops = stage.resolve(
        [f for f in files if pq.read_metadata(f).num_rows > 0], work.global_dir(g), run, executor
    )
    write_table_atomic(work.drops(g), drops)


def tokenize_input(job: Job, k_last: int, i: int, tokenizer_path: str) -> dict[str, Any]:
    """Encode the surviving documents of input ``i`` (one Rust call per batch)."""
    work = WorkDir.open(Path(job.work_root))
    marker = work.tokens_marker(i)
    if marker.exists():
        return json.loads(marker.read_text())
    step = Tokenize(_tokenizer(tokenizer_path))
    counts = StageCounts(step.name)
    writer = AtomicArrowWriter(work.tokens(i))
    for batch in iter_arrow(work.docs(k_last, i), batch_size=1000):
        writer.write(step.run(batch, counts))
    step.tokenizer.clear_cache()  # reused across this input's batches; not held into the next phase
    writer.commit(Tokenize.schema)
    result = {"counts": [counts.to_dict()]}
    atomic_write_json(marker, result)
    return result


@lru_cache(maxsize=2)
def _tokenizer(path: str) -> Any:
    from llmpipe.tokenizer import Tokenizer

    return Tokenizer.from_file(path)
