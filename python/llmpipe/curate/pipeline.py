"""The curate executor: per-input map steps, global steps between them, tokenize, pack.

    read+doc stages (per input) -> global stage resolve -> apply drops + next doc stages (per input)
      -> ... -> tokenizer (train on a sample or load) -> tokenize (per input) -> pack (in input order)

Per-input steps are plain functions of (config, work dir, segment, input index) so that an executor
can run them anywhere: ``LocalExecutor`` runs them in this process, the Ray executor on a cluster.
Outputs appear by atomic rename; each step writes its completion marker last.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llmpipe import __version__
from llmpipe.curate.quarantine import QuarantineWriter
from llmpipe.curate.settings import CurateConfig
from llmpipe.curate.stage import (
    DOC_SCHEMA,
    DocStage,
    Executor,
    GlobalStage,
    StageCounts,
    apply_reasons,
    word_counts,
)
from llmpipe.curate.workdir import (
    AtomicParquetWriter,
    WorkDir,
    delay_point,
    fault_point,
    fingerprint,
    write_table_atomic,
)
from llmpipe.data.format import MANIFEST, TOKENIZER_FILE, atomic_write_json, sha256_file
from llmpipe.errors import InputError
from llmpipe.io.discover import discover_inputs
from llmpipe.io.read import detect_format, read_batches
from llmpipe.io.records import Bad
from llmpipe.lock import DirLock

DOCS_SCHEMA = DOC_SCHEMA.append(pa.field("meta", pa.string()))
TOKENS_SCHEMA = pa.schema([("tokens", pa.large_list(pa.uint32())), ("words", pa.int64())])


@dataclass(frozen=True)
class Job:
    """Everything a per-input step needs; small and picklable."""

    config: dict[str, Any]
    work_root: str
    files: tuple[str, ...]
    keys: tuple[str, ...]
    strict: bool


@dataclass
class Segment:
    doc_stages: list[DocStage]
    ends_with: GlobalStage | None  # the global stage whose keys this segment prepares
    after: GlobalStage | None  # the global stage whose drops this segment applies first


@lru_cache(maxsize=8)
def _stages_for(config_json: str) -> list[Any]:
    return CurateConfig.from_mapping(json.loads(config_json)).build_stages()


def stages_of(job: Job) -> list[Any]:
    return _stages_for(json.dumps(job.config, sort_keys=True))


def segments_of(stages: Sequence[Any]) -> list[Segment]:
    segs: list[Segment] = []
    current: list[DocStage] = []
    after: GlobalStage | None = None
    for st in stages:
        if isinstance(st, GlobalStage):
            segs.append(Segment(current, st, after))
            current, after = [], st
        else:
            current.append(st)
    segs.append(Segment(current, None, after))
    return segs


class LocalExecutor:
    """Runs per-input steps one after another in this process (Rust threads use every core)."""

    workers = 1  # one task at a time: a global stage's partition phases share one process

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str) -> list[Any]:
        from tqdm import tqdm

        out = []
        for j, a in enumerate(tqdm(args, desc=desc, unit="file", disable=not self.progress, leave=False)):
            out.append(fn(*a))
            fault_point(f"{desc}#{j}")
        return out


# -- per-input steps (run by any executor) ------------------------------------------------------


def _input_batches(
    job: Job,
    work: WorkDir,
    k: int,
    i: int,
    seg: Segment,
    counts: list[StageCounts],
    bad: QuarantineWriter,
) -> Iterator[pa.RecordBatch]:
    if k == 0:
        read, extract = StageCounts("read"), StageCounts("extract")
        counts += [read, extract]
        cfg = CurateConfig.from_mapping(job.config).read
        src = job.keys[i]

        def on_bad(b: Bad) -> None:
            if job.strict:
                raise InputError(f"{job.files[i]}: {b.location}: {b.reason} ({b.detail}) [--strict]")
            bad.add(b)
            read.docs_in += b.records
            read.dropped[f"quarantined_{b.reason}"] += b.records

        yield from read_batches(Path(job.files[i]), src, cfg, on_bad, read, extract)
        return
    assert seg.after is not None
    drops = _load_drops(str(work.drops(k - 1)))
    gc = StageCounts(seg.after.name)
    counts.append(gc)
    pf = pq.ParquetFile(work.docs(k - 1, i))
    for batch in pf.iter_batches(batch_size=1000):
        words = word_counts(batch)
        reasons = [drops.get(x) for x in batch.column("id").to_pylist()]
        kept = apply_reasons(batch, reasons, gc, words)
        if kept.num_rows:
            yield kept


@lru_cache(maxsize=2)
def _load_drops(path: str) -> dict[str, str]:
    t = pq.read_table(path, columns=["id", "reason"])
    return dict(zip(t.column("id").to_pylist(), t.column("reason").to_pylist(), strict=True))


def map_segment(job: Job, k: int, i: int) -> dict[str, Any]:
    """Run segment ``k`` on input ``i``; returns (and stores) the marker: counts and quarantined records."""
    work = WorkDir.open(Path(job.work_root))
    marker = work.marker(k, i)
    if marker.exists():
        return json.loads(marker.read_text())
    delay_point(f"segment {k}")
    seg = segments_of(stages_of(job))[k]
    counts: list[StageCounts] = []
    bad = QuarantineWriter(work.quarantine(i), job.keys[i])
    stage_counts = [StageCounts(s.name) for s in seg.doc_stages]
    docs_out = AtomicParquetWriter(work.docs(k, i))
    keys_out = AtomicParquetWriter(work.keys(k, i)) if seg.ends_with is not None else None
    for batch in _input_batches(job, work, k, i, seg, counts, bad):
        for st, c in zip(seg.doc_stages, stage_counts, strict=True):
            batch = st.run(batch, c)
            if batch.num_rows == 0:
                break
        if batch.num_rows == 0:
            continue
        docs_out.write(batch)
        if keys_out is not None and seg.ends_with is not None:
            keys_out.write(seg.ends_with.prepare(batch))
    fault_point(f"segment {k}#{i} written")  # outputs complete, not yet renamed into place
    docs_out.commit(DOCS_SCHEMA)
    if keys_out is not None:
        keys_out.commit(pa.schema([("id", pa.string())]))
    if k == 0:
        bad.commit()
    fault_point(f"segment {k}#{i} committed")  # outputs in place, marker not yet written
    result = {
        "counts": [c.to_dict() for c in counts + stage_counts],
        "quarantine": dict(bad.by_reason),  # the records are in work.quarantine(i)
        "format": detect_format(Path(job.files[i])) if k == 0 else None,
    }
    atomic_write_json(marker, result)
    return json.loads(marker.read_text())  # exactly what a resumed run reads: same bytes out


def resolve_global(job: Job, k: int, executor: Executor | None = None) -> None:
    """Run global stage ``k``'s resolve here; its partition phases go through ``executor`` (Ray tasks)."""
    work = WorkDir.open(Path(job.work_root))
    if work.drops(k).exists():
        return
    stage = segments_of(stages_of(job))[k].ends_with
    assert stage is not None
    shutil.rmtree(work.global_dir(k))  # leftovers of a killed resolve are not inputs to this one
    files = [work.keys(k, i) for i in range(len(job.files))]
    markers = [json.loads(work.marker(0, i).read_text()) for i in range(len(job.files))]
    stage.set_run_input_words(
        sum(c["tokens_in"] for m in markers for c in m["counts"] if c["name"] == "read")
    )
    drops = stage.resolve(
        [f for f in files if pq.read_metadata(f).num_rows > 0], work.global_dir(k), executor
    )
    write_table_atomic(work.drops(k), drops)


def tokenize_input(job: Job, k_last: int, i: int, tokenizer_path: str) -> dict[str, Any]:
    """Encode the surviving documents of input ``i`` (one Rust call per batch)."""
    work = WorkDir.open(Path(job.work_root))
    out = work.root / "tokens" / f"{i:06d}.parquet"
    marker = out.with_suffix(".done.json")
    if marker.exists():
        return json.loads(marker.read_text())
    out.parent.mkdir(exist_ok=True)
    tok = _tokenizer(tokenizer_path)
    counts = StageCounts("tokenize")
    writer = AtomicParquetWriter(out)
    for batch in pq.ParquetFile(work.docs(k_last, i)).iter_batches(batch_size=1000):
        words = word_counts(batch)
        all_ids, all_offsets = tok.encode_batch_arrays(batch.column("text").to_pylist())
        lengths = np.diff(all_offsets)
        reasons = ["empty_after_tokenize" if n == 0 else None for n in lengths.tolist()]
        counts.docs_in += batch.num_rows
        counts.tokens_in += int(words.sum())
        for r, w in zip(reasons, words.tolist(), strict=True):
            if r is not None:
                counts.dropped[r] += 1
                counts.dropped_tokens[r] += w
        keep = lengths > 0
        counts.docs_out += int(keep.sum())
        counts.tokens_out += int(lengths[keep].sum())
        flat = all_ids  # documents with no tokens contribute nothing to the flat array
        offsets = np.concatenate([[0], np.cumsum(lengths[keep])]).astype(np.int64)
        col = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.uint32()))
        writer.write(pa.table({"tokens": col, "words": pa.array(words[keep])}, schema=TOKENS_SCHEMA))
    writer.commit(TOKENS_SCHEMA)
    result = {"counts": [counts.to_dict()]}
    atomic_write_json(marker, result)
    return result


@lru_cache(maxsize=2)
def _tokenizer(path: str) -> Any:
    from llmpipe.tokenizer import Tokenizer

    return Tokenizer.from_file(path)


# -- the driver ---------------------------------------------------------------------------------


def _source_keys(files: list[Path]) -> list[str]:
    """Input names relative to their common directory: stable ids and readable provenance."""
    if len(files) == 1:
        return [files[0].name]
    root = Path(os.path.commonpath([str(f.parent) for f in files]))
    return [str(f.relative_to(root)) for f in files]


def _merge_counts(markers: list[dict[str, Any]], into: dict[str, StageCounts], order: list[str]) -> None:
    for m in markers:
        for c in m["counts"]:
            sc = StageCounts.from_dict(c)
            if sc.name not in into:
                into[sc.name] = StageCounts(sc.name)
                order.append(sc.name)
            into[sc.name].merge(sc)


def run_curate(
    inputs: list[str],
    out: Path,
    config: CurateConfig,
    *,
    tokenizer_file: Path | None = None,
    strict: bool = False,
    executor: Executor | None = None,
    keep_work: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Curate ``inputs`` into token shards in ``out``; returns the stats (also written to stats.json)."""
    executor = executor or LocalExecutor()
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot create the directory ({e.strerror})") from None
    with DirLock(out):
        return _run_curate_locked(inputs, out, config, tokenizer_file, strict, executor, keep_work, log)


def _run_curate_locked(
    inputs: list[str],
    out: Path,
    config: CurateConfig,
    tokenizer_file: Path | None,
    strict: bool,
    executor: Executor,
    keep_work: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    found = discover_inputs(inputs, exclude=[out])
    for s in found.excluded:
        log(f"curate: left out {s}")
    for s in found.skipped:
        if strict:
            raise InputError(f"{s} [--strict]")
        log(f"curate: skipped {s}")
    files = found.files
    keys = _source_keys(files)
    if tokenizer_file is not None and not Path(tokenizer_file).is_file():
        what = "a directory, not a file" if Path(tokenizer_file).is_dir() else "no such file"
        raise InputError(f"--tokenizer {tokenizer_file}: {what}")
    tok_sha = sha256_file(tokenizer_file) if tokenizer_file else None
    fp = fingerprint(
        files,
        keys,
        config.to_dict(),
        {"tokenizer": tok_sha, "strict": strict, "v": __version__, "skipped": found.skipped},
    )
    done = out / ".llmpipe-done.json"
    if done.exists() and (out / MANIFEST).exists() and json.loads(done.read_text()).get("fingerprint") == fp:
        log(f"{out}: already complete for these inputs and config (delete it to run again)")
        return json.loads((out / "stats.json").read_text())
    done.unlink(missing_ok=True)
    work = WorkDir(out, fp)
    job = Job(config.to_dict(), str(work.root), tuple(map(str, files)), tuple(keys), strict)
    stages = stages_of(job)
    segments = segments_of(stages)
    log(
        f"curate: {len(files)} input(s), stages: {' -> '.join(['read', 'extract', *[s.name for s in stages], 'tokenize', 'pack'])}"
    )

    counts: dict[str, StageCounts] = {}
    order: list[str] = []
    quarantine: Counter[str] = Counter()
    formats: dict[str, int] = {}
    for k, seg in enumerate(segments):
        markers = executor.map(map_segment, [(job, k, i) for i in range(len(files))], f"segment {k}")
        _merge_counts(markers, counts, order)
        if k == 0:
            for m in markers:
                quarantine.update(m["quarantine"])
                formats[m["format"]] = formats.get(m["format"], 0) + 1
        if seg.ends_with is not None:
            resolve_global(job, k, executor)
    k_last = len(segments) - 1

    tok_path = work.root / TOKENIZER_FILE
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, tok_path)
    elif not tok_path.exists():
        _train_tokenizer(config, work, k_last, len(files), tok_path, log)
        fault_point("tokenizer")
    markers = executor.map(
        tokenize_input, [(job, k_last, i, str(tok_path)) for i in range(len(files))], "tokenize"
    )
    _merge_counts(markers, counts, order)

    stats = _pack(
        job, config, work, out, tok_path, counts, order, quarantine, formats, files, keys, found.skipped, log
    )
    r = stats["retention"]
    if r["docs_out"] == 0:  # outputs stay for the report; no done marker, so a re-run says it again
        raise InputError(
            f"no document was kept ({r['docs_in']:,} read, all dropped or quarantined): "
            f"see {out / 'report.html'} and {out / 'stats.json'} for why"
        )
    fault_point("outputs")
    if not keep_work:
        work.remove()
    fault_point("work removed")
    atomic_write_json(done, {"fingerprint": fp})
    return stats


def _train_tokenizer(
    config: CurateConfig, work: WorkDir, k_last: int, n: int, tok_path: Path, log: Callable[[str], None]
) -> None:
    from llmpipe.tokenizer import Tokenizer

    sample = work.root / "tokenizer-sample.txt"
    budget = config.tokenizer.sample_bytes
    tmp = sample.with_name(".sample.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for i in range(n):
            if budget <= 0:
                break
            for batch in pq.ParquetFile(work.docs(k_last, i)).iter_batches(batch_size=1000, columns=["text"]):
                for t in batch.column("text").to_pylist():
                    f.write(t)
                    f.write("\n")
                    budget -= len(t.encode("utf-8")) + 1
                    if budget <= 0:
                        break
                if budget <= 0:
                    break
    os.replace(tmp, sample)
    log(
        f"tokenizer: training byte-level BPE, vocab {config.tokenizer.vocab_size}, on {sample.stat().st_size:,} bytes of kept text"
    )
    tok = Tokenizer.train(
        [str(sample)],
        config.tokenizer.vocab_size,
        pattern=config.tokenizer.pattern,
        min_frequency=config.tokenizer.min_frequency,
    )
    tmp_tok = tok_path.with_name(".tokenizer.tmp.json")
    tok.save(str(tmp_tok))
    os.replace(tmp_tok, tok_path)


def _pack(
    job: Job,
    config: CurateConfig,
    work: WorkDir,
    out: Path,
    tok_path: Path,
    counts: dict[str, StageCounts],
    order: list[str],
    quarantine: Counter[str],
    formats: dict[str, int],
    files: list[Path],
    keys: list[str],
    skipped: list[str],
    log: Callable[[str], None],
) -> dict[str, Any]:
    from llmpipe.curate.funnel import build_stats, write_outputs
    from llmpipe.data.writer import ShardWriter
    from llmpipe.tokenizer import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    staging = work.root / "shards"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    shutil.copyfile(tok_path, staging / TOKENIZER_FILE)
    provenance = {
        "inputs": [{"file": k, "bytes": f.stat().st_size} for f, k in zip(files, keys, strict=True)],
        "config_sha256": config.sha256(),
        "config": config.to_dict(),
        "llmpipe_version": __version__,
    }
    writer = ShardWriter(
        staging,
        seq_len=config.pack.seq_len,
        vocab_size=tok.vocab_size,
        eos_id=tok.eos_id,
        tokenizer_file=staging / TOKENIZER_FILE,
        samples_per_shard=config.pack.samples_per_shard,
        val_fraction=config.pack.val_fraction,
        provenance=provenance,
        packing=config.pack.packing,
        best_fit_window=config.pack.best_fit_window,
    )
    pack = StageCounts("pack")
    for i in range(len(files)):
        table = pq.read_table(work.root / "tokens" / f"{i:06d}.parquet")
        col = table.column("tokens").combine_chunks()
        offsets = col.offsets.to_numpy().astype(np.int64)
        flat = col.values.to_numpy(zero_copy_only=False)
        flat = flat[offsets[0] : offsets[-1]]  # a sliced column's offsets need not start at 0
        offsets -= offsets[0]
        pack.docs_in += len(col)
        pack.docs_out += len(col)
        pack.tokens_in += len(flat)
        writer.add_flat(flat, offsets)
    manifest = writer.close()
    pack.tokens_out = manifest["counts"]["tokens"]
    counts["pack"] = pack
    order.append("pack")
    stats = build_stats([counts[n] for n in order], dict(quarantine), formats, manifest)
    stats["inputs"]["skipped"] = skipped
    write_outputs(out, staging, stats, [work.quarantine(i) for i in range(len(files))], log)
    return stats
