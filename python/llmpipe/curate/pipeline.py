"""``run_curate``: the driver of a curate run. Its body is the data path:

    read -> extract -> normalize -> filters -> exact dedup -> near dedup -> model score -> PII
         -> tokenizer (train on a sample of the kept text, or load) -> tokenize -> pack -> publish

The per-input steps (``llmpipe.curate.steps``) run through an executor (this process, or Ray tasks);
global stages resolve between the segments of document stages; tokenizer training, packing and
publishing run here. The work directory and completion markers make a killed run resumable.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from llmpipe import __version__
from llmpipe.curate.executors import Done, Executor, InOrder, LocalExecutor, executor_workers
from llmpipe.curate.funnel import CURATE_OUT, DONE, Funnel, finished_stats, write_outputs
from llmpipe.curate.progress import JobProgress
from llmpipe.curate.remote import RemoteOut, default_staging, remove_staging
from llmpipe.curate.settings import CurateConfig
from llmpipe.curate.stage import RunContext, StageCounts
from llmpipe.curate.stages.pack import Pack
from llmpipe.curate.stages.tokenize import TrainTokenizer, reserved_ids
from llmpipe.curate.steps import (
    Job,
    Part,
    before_extract,
    built_stages,
    map_segment,
    ready,
    resolve_global,
    segments_of,
    stages_of,
    tokenize_input,
)
from llmpipe.curate.workdir import CACHE, WORK_LAYOUT, WorkDir, fault_point, fingerprint
from llmpipe.data.format import atomic_write_json, read_manifest, sha256_file
from llmpipe.errors import InputError, ShardError
from llmpipe.io.chunks import Span, split
from llmpipe.io.discover import discover_inputs
from llmpipe.io.fs import InputPath, RemotePath, is_url, local_or_url
from llmpipe.io.read import detect_format
from llmpipe.lock import DirLock
from llmpipe.memory import release_memory

#: the automatic chunk size (``--chunk-mb`` not given) lies between these: inputs larger than the
#: chunk size run as several parts
CHUNK_BYTES = 128 << 20
MIN_CHUNK_BYTES = 16 << 20
#: the automatic chunk size aims at this many parts per worker: the last parts to finish then leave
#: the other workers idle for a small share of the run (one part per worker leaves half of them idle
#: for up to half of it when the parts differ in size or speed)
PARTS_PER_WORKER = 4
#: consecutive inputs smaller than this together run as one part, of at most GROUP_FILES files
GROUP_BYTES = 1 << 20
GROUP_FILES = 64


def run_curate(
    inputs: list[str],
    out: Path | str,
    config: CurateConfig,
    *,
    tokenizer_file: Path | None = None,
    strict: bool = False,
    executor: Executor | None = None,
    keep_work: bool = False,
    chunk_bytes: int | None = None,
    progress: bool | None = None,
    staging: Path | None = None,
    follow_symlinks: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Curate ``inputs`` into token shards in ``out``; returns the stats (also written to stats.json).

    Inputs and ``out`` may be URLs of any fsspec file system (``s3://bucket/prefix``). A URL ``out``
    runs in the local directory ``staging`` (default: one kept per URL) and is uploaded when done
    (``llmpipe.curate.remote``). Inputs larger than ``chunk_bytes`` (JSONL, Parquet, crawl archives)
    run as several parts on any worker; the output does not depend on the chunk size or on the
    executor. ``chunk_bytes`` None: ``auto_chunk_bytes`` for the executor's workers, or the size a
    killed run of the same job used (so it resumes whatever ``--workers`` is now).
    ``progress``: one bar on a terminal, one line every 30 s in a log; None: a bar when stderr is a
    terminal, else the lines. ``follow_symlinks``: follow symlinks in input directories wherever they
    lead (default: only into the named inputs). ``overwrite``: write into an ``out`` that holds files
    llmpipe did not write (default: refused, naming them)."""
    if tokenizer_file is not None:
        _check_tokenizer(Path(tokenizer_file), config)
    executor = executor or LocalExecutor()
    store = RemoteOut(str(out)) if is_url(str(out)) else None
    if store is not None:
        store.check()
        local = Path(staging) if staging is not None else default_staging(store.url)
    else:
        local = Path(local_or_url(str(out)))
    what = "--work-dir" if store is not None and staging is not None else "--out"
    CURATE_OUT.check(local, overwrite, what)  # a directory of the user's files is not written into
    # the inputs before the output directory: a run that finds none leaves no directory behind
    files, skipped = _discover(inputs, [local, *([store.url] if store else [])], strict, log, follow_symlinks)
    built_stages(config)  # and the stages: a model or list file the config names that they refuse too
    try:
        local.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        what = "--work-dir" if store is not None else "--out"
        raise InputError(f"{what} {local}: cannot create the directory ({e.strerror})") from None
    with DirLock(local):  # one run per output directory; a second one says who holds it
        keys = source_keys(files)
        fp = _fingerprint(files, keys, config, tokenizer_file, strict)
        if store is not None and (done := store.finished(fp)) is not None:
            log(f"{store.url}: already complete for these inputs and config (delete it to run again)")
            return done
        run = Run(
            files=tuple(files),
            keys=tuple(keys),
            fingerprint=fp,
            skipped=tuple(skipped),
            out=local,
            config=config,
            tokenizer_file=tokenizer_file,
            strict=strict,
            executor=executor,
            keep_work=keep_work,
            chunk_bytes=chunk_bytes,
            progress=progress,
            log=log,
        )
        stats = _curate(run)
        if store is not None:
            store.publish(local, log)
    if store is not None and not keep_work:
        remove_staging(local)
    return stats


def _check_tokenizer(tokenizer_file: Path, config: CurateConfig) -> None:
    """A given tokenizer is a tokenizer file that holds the special tokens the config reserves, checked
    before any work: one line naming the file given."""
    from llmpipe.errors import LlmpipeError
    from llmpipe.tokenizer import Tokenizer

    where = f"--tokenizer {tokenizer_file}"
    if not tokenizer_file.is_file():
        what = "a directory, not a file" if tokenizer_file.is_dir() else "no such file"
        raise InputError(f"{where}: {what}")
    try:
        Tokenizer.from_file(tokenizer_file)
    except LlmpipeError as e:
        why = str(e).removeprefix(f"{tokenizer_file}: ")
        raise type(e)(f"{where}: {why}") from None
    if config.tokenizer.special_tokens:
        reserved_ids(tokenizer_file, config.tokenizer.reserved(), where)


def _fingerprint(
    files: list[InputPath], keys: list[str], config: CurateConfig, tokenizer_file: Path | None, strict: bool
) -> str:
    tok_sha = sha256_file(tokenizer_file) if tokenizer_file else None
    return fingerprint(
        files,
        keys,
        config.to_dict(),
        {"tokenizer": tok_sha, "strict": strict, "v": __version__, "work": WORK_LAYOUT},
    )


@dataclass(frozen=True, slots=True)
class Run:
    """One curate run as ``run_curate`` resolved it (inputs found, fingerprint taken, the local
    directory to run in): built once, then read by ``_curate``."""

    files: tuple[InputPath, ...]  # the inputs, each once, in order
    keys: tuple[str, ...]  # their stable names (``source_keys``)
    fingerprint: str  # of inputs, config, tokenizer and flags (``_fingerprint``)
    skipped: tuple[str, ...]  # what discovery could not read
    out: Path  # the local output (or staging) directory
    config: CurateConfig
    tokenizer_file: Path | None  # a given tokenizer, else one is trained
    strict: bool
    executor: Executor
    keep_work: bool
    chunk_bytes: int | None  # None: planned from the inputs and the executor's workers
    progress: bool | None
    log: Callable[[str], None]


def _curate(run: Run) -> dict[str, Any]:
    out, config, log = run.out, run.config, run.log
    if (stats := _complete(out, run.fingerprint)) is not None:
        log(f"{out}: already complete for these inputs and config (delete it to run again)")
        return stats
    (out / DONE).unlink(missing_ok=True)
    total = sum(f.stat().st_size for f in run.files)
    chunk_bytes = run.chunk_bytes
    if chunk_bytes is None:
        planned = WorkDir.planned_chunk(out, run.fingerprint)
        chunk_bytes = planned or auto_chunk_bytes(total, executor_workers(run.executor))
    start = getattr(run.executor, "start", None)
    if start is not None and (total > chunk_bytes or (len(run.files) > 1 and total > GROUP_BYTES)):
        start(ready)  # several parts ahead: the workers start up while the parts are planned
    parts = plan_parts(run.files, chunk_bytes)
    # a resumed run with other parts starts over
    work = WorkDir(
        out, work_fingerprint(run.fingerprint, parts), {"run": run.fingerprint, "chunk_bytes": chunk_bytes}
    )
    job = Job(config, str(work.root), tuple(map(str, run.files)), run.keys, run.strict, parts)
    stages = stages_of(job)
    segments = segments_of(stages)
    pre = before_extract(stages)
    names = [
        "read",
        *[s.name for s in pre],
        "extract",
        *[s.name for s in stages if s not in pre],
        "tokenize",
        "pack",
    ]
    log(f"curate: {len(run.files)} input(s) in {len(parts)} part(s), stages: {' -> '.join(names)}")
    each = range(len(parts))
    funnel = Funnel()
    funnel.skipped = list(run.skipped)
    tty = sys.stderr.isatty()
    bar = JobProgress(
        sum(p.size for p in parts),
        tty,
        log,
        enabled=run.progress is not False and (tty or run.progress is None or run.progress),
    )

    def read(i: int, marker: dict[str, Any]) -> None:
        bar.read(parts[i].size, next(c["docs_in"] for c in marker["counts"] if c["name"] == "read"))

    kept = [work.docs(len(segments) - 1, i) for i in each]

    def train(n: int) -> None:  # on the kept documents of the first n parts
        TrainTokenizer(config.tokenizer, bar.say).run(kept[:n], work.tokenizer)
        release_memory()  # the trainer's freed word and pair tables: packing does not start on top
        fault_point("tokenizer")

    # read -> extract -> the document stages, each global stage resolving between two segments
    for k, seg in enumerate(segments):
        bar.phase(f"segment {k}" if k else "read")
        done: Done | None = read if k == 0 else None
        if k == len(segments) - 1 and run.tokenizer_file is None and not work.tokenizer.exists():
            done = EarlyTraining(config.tokenizer.sample_bytes, train, done)
        funnel.add(run.executor.map(map_segment, [(job, k, i) for i in each], f"segment {k}", done))
        for j, (g, st) in enumerate(seg.ends_with):
            bar.phase(st.name)
            dropped = tuple(work.drops(e) for e, _ in seg.ends_with[:j])  # keys prepared before those drops
            context = RunContext(input_words=funnel.input_words, cache=out / CACHE, dropped=dropped)
            resolve_global(job, g, context, run.executor)
            release_memory()

    # tokenizer: the given one, or a byte-level BPE trained on the kept text (here, unless the last
    # segment's first parts held the whole sample and it was trained while the others ran)
    if run.tokenizer_file is not None:
        shutil.copyfile(run.tokenizer_file, work.tokenizer)
    elif not work.tokenizer.exists():
        bar.phase("tokenizer training")
        train(len(kept))
    bar.phase("tokenize")

    # tokenize -> pack (here, each input as soon as it and the ones before it are tokenized) ->
    # publish (shards by atomic rename, the manifest last)
    provenance = {
        "inputs": [{"file": k, "bytes": f.stat().st_size} for f, k in zip(run.files, run.keys, strict=True)],
        "config_sha256": config.sha256(),
        "config": config.to_dict(),
        "llmpipe_version": __version__,
    }
    pack = Pack(config.pack, work.tokenizer, provenance, config.tokenizer.reserved())
    packed = StageCounts(pack.name)  # joins the funnel after tokenize's counts: the funnel's order
    packing = pack.start(work.staging, packed)
    in_order = InOrder(lambda i: packing.add(work.tokens(i)))
    args = [(job, len(segments) - 1, i, str(work.tokenizer)) for i in each]
    funnel.add(run.executor.map(tokenize_input, args, "tokenize", in_order))
    bar.phase("pack")
    in_order.finish(len(args))
    manifest = packing.close()
    funnel.stage(pack.name).merge(packed)
    stats = funnel.stats(manifest)
    bar.close()
    write_outputs(out, work.staging, stats, [work.quarantine(i) for i in each], log)
    r = stats["retention"]
    if r["docs_out"] == 0:  # outputs stay for the report; no done marker, so a re-run says it again
        raise InputError(
            f"no document was kept ({r['docs_in']:,} read, all dropped or quarantined): "
            f"see {out / 'report.html'} and {out / 'stats.json'} for why"
        )
    fault_point("outputs")
    if not run.keep_work:
        work.remove()
    fault_point("work removed")
    atomic_write_json(out / DONE, {"fingerprint": run.fingerprint})
    return stats


class EarlyTraining:
    """A ``Done`` of the last document segment: as soon as the parts finished so far in input order
    hold the whole tokenizer sample (the ``sample_bytes`` of their markers), ``train(n)`` trains on the
    first ``n`` of them while the workers go on with the rest (the driver and the cores were idle while
    it trained after the segment). The sample is the same either way, the first ``budget`` bytes of
    kept text in input order, and so is the tokenizer."""

    def __init__(self, budget: int, train: Callable[[int], None], then: Done | None = None) -> None:
        self.budget = budget
        self.train = train
        self.then = then
        self.sizes: dict[int, int | None] = {}
        self.next = 0
        self.total = 0
        self.off = False  # trained, or a part's size is unknown (a marker of an older run)

    def __call__(self, j: int, marker: dict[str, Any]) -> None:
        if self.then is not None:
            self.then(j, marker)
        self.sizes[j] = marker.get("sample_bytes")
        while not self.off and self.next in self.sizes:
            size = self.sizes.pop(self.next)
            self.next += 1
            if size is None:
                self.off = True
                return
            self.total += size
            if self.total >= self.budget:
                self.off = True
                self.train(self.next)


def _discover(
    inputs: list[str],
    outs: list[Path | str],
    strict: bool,
    log: Callable[[str], None],
    follow_symlinks: bool = False,
) -> tuple[list[InputPath], list[str]]:
    """The input files (each once, output directories left out) and every path not read, with why
    (what could not or must not be read; output directories, hidden and temporary names)."""
    found = discover_inputs(inputs, exclude=outs, follow_symlinks=follow_symlinks)
    for s in found.excluded:
        log(f"curate: left out {s}")
    for s in found.skipped:
        if strict:
            raise InputError(f"{s} [--strict]")
        log(f"curate: skipped {s}")
    for s in found.ignored:
        log(f"curate: skipped {s}")
    return found.files, found.skipped + found.excluded + found.ignored


def auto_chunk_bytes(total: int, workers: int) -> int:
    """The chunk size for ``total`` bytes of input on ``workers`` workers: ``PARTS_PER_WORKER`` parts
    per worker, more where a part would exceed ``CHUNK_BYTES``, their number a multiple of the workers
    (9 parts on 2 workers left one worker alone with the last part: 18% of a 1.2 GB run's wall time),
    and no part under ``MIN_CHUNK_BYTES`` (a part's fixed costs stay small, and one part's work files
    and dedup state stay bounded)."""
    w = max(1, workers)
    parts = max(PARTS_PER_WORKER * w, -(-total // CHUNK_BYTES))
    parts = -(-parts // w) * w
    return max(MIN_CHUNK_BYTES, -(-total // parts))


def plan_parts(files: Sequence[InputPath], chunk_bytes: int) -> tuple[Part, ...]:
    """Every input as one part, as equal chunks of at most about ``chunk_bytes`` when it is larger
    (400 MB at 128 MB: four of 100 MB, not three of 128 and one of 16), and runs of
    consecutive small inputs as one part of at most ``GROUP_FILES`` files and
    ``min(GROUP_BYTES, chunk_bytes)`` bytes: a step's fixed costs (work files, markers, a task) are
    then paid per part, not per tiny file."""
    if chunk_bytes < 1:
        raise InputError(f"chunk size must be positive, got {chunk_bytes} bytes")
    limit, group_files = min(GROUP_BYTES, chunk_bytes), GROUP_FILES
    parts: list[Part] = []
    for f, path in enumerate(files):
        size = path.stat().st_size
        if size <= chunk_bytes:
            spans: list[Span | None] = [None]
        else:  # size / ceil(size / chunk_bytes), rounded up
            spans = split(path, detect_format(path), -(-size // -(-size // chunk_bytes)))
        if spans == [None]:  # a whole file: it may join the previous part
            last = parts[-1] if parts else None
            if (
                last is not None
                and last.span is None
                and last.file + last.count == f
                and last.count < group_files
                and last.size + size <= limit
            ):
                parts[-1] = replace(last, size=last.size + size, count=last.count + 1)
            else:
                parts.append(Part(f, None, 0, size))
            continue
        for c, span in enumerate(spans):
            # a JSONL chunk knows its bytes; a Parquet chunk (row groups) takes its share of the file
            share = span.end - span.start if span is not None and len(spans) > 1 else size
            parts.append(Part(f, span, c, share if share > 0 and share <= size else size // len(spans)))
    return tuple(parts)


def work_fingerprint(fp: str, parts: tuple[Part, ...]) -> str:
    """The run's fingerprint and its plan: the work directory's markers are numbered by part."""
    return hashlib.sha256(f"{fp}\0{parts!r}".encode()).hexdigest()


def source_keys(files: list[InputPath]) -> list[str]:
    """Input names relative to their common directory: stable ids and readable provenance. A tree of
    files gets the same keys on a store (``s3://bucket/in/a.jsonl``) as on a disk (``/data/in/a.jsonl``)."""
    if len(files) == 1:
        return [files[0].name]
    # a remote file as the path /<protocol>/<bucket>/<key>: one tree with the local ones
    paths = [PurePosixPath(f"/{f.protocol}/{f.path}") if isinstance(f, RemotePath) else f for f in files]
    root = os.path.commonpath([str(p.parent) for p in paths])
    return [str(p.relative_to(root)) for p in paths]


def _complete(out: Path, fp: str) -> dict[str, Any] | None:
    """The stats of a finished run of the same inputs, config and tokenizer in ``out``; None where there
    is none, or where its done marker, stats or manifest is damaged (the run is done again)."""
    try:
        stats = finished_stats((out / DONE).read_bytes(), (out / "stats.json").read_bytes(), fp)
        if stats is not None:
            read_manifest(out)
    except (OSError, ShardError):
        return None
    return stats
