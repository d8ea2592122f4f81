"""``llmpipe curate INPUT... --out DIR``: raw inputs to token shards, with a funnel report."""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

from llmpipe.curate.settings import CurateConfig
from llmpipe.errors import ConfigError
from llmpipe.io.fs import is_url, local_or_url


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "curate",
        help="curate raw inputs into Arrow token shards",
        description=(
            "Read raw inputs (files or directories, recursed; JSONL[.gz|.zst|.bz2], Parquet, text, "
            "WARC/WET/ARC), run the stages of the config (filters, dedup, PII ...), train or load a "
            "byte-level BPE tokenizer, and pack tokens into Arrow IPC shards with manifest.json, "
            "stats.json, report.html and quarantine.jsonl."
        ),
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="input files, directories or glob patterns; local, or URLs of any fsspec file system (s3://...)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output shard directory, or a URL (s3://bucket/prefix: the run is staged in --work-dir, then uploaded)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="local staging directory for a URL --out (default: one per URL under ~/.cache/llmpipe/staging)",
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="curate YAML config (see configs/curate/)")
    p.add_argument(
        "--seq-len",
        type=int,
        metavar="N",
        help="tokens per training sample (overrides pack.seq_len; 2 to 1,048,576)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--vocab-size", type=int, metavar="N", help="train a tokenizer of this size (tokenizer.vocab_size)"
    )
    g.add_argument(
        "--tokenizer", type=Path, metavar="FILE", help="use this tokenizer.json instead of training one"
    )
    p.add_argument(
        "--special-tokens",
        metavar="LIST",
        help="comma-separated special tokens the trained tokenizer reserves after <|endoftext|> "
        "(tokenizer.special_tokens): presets mlm (<mask>,<pad>) and t5 (<pad>,<extra_id_0>..<extra_id_99>) "
        "or literal tokens such as '<cls>'; recorded in manifest.json, never produced by encoding text",
    )
    p.add_argument(
        "--strict", action="store_true", help="fail on the first bad record instead of quarantining it"
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run on a Ray cluster: 'auto' (inside `ray job submit` or a started cluster) or an address",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="worker processes on this machine (default: its cores); ignored with --ray",
    )
    p.add_argument(
        "--chunk-mb",
        type=float,
        default=None,
        metavar="MB",
        help="split inputs larger than this into parts (JSONL, Parquet, crawl archives; default: the "
        "input bytes over 4 parts per worker, between 16 and 128 MB)",
    )
    p.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow symlinks in input directories wherever they lead (default: only to files and "
        "directories inside the named inputs; the others are skipped and listed)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even when it holds files llmpipe did not write (default: refused)",
    )
    p.add_argument("--keep-work", action="store_true", help="keep the intermediate work directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> CurateConfig:
    cfg = CurateConfig.load(args.config)
    try:  # the config classes check their values
        if args.seq_len is not None:
            cfg.pack = replace(cfg.pack, seq_len=args.seq_len)
    except ValueError as e:
        raise ConfigError(f"--seq-len {args.seq_len}: {e}") from None
    try:
        if args.vocab_size is not None:
            cfg.tokenizer = replace(cfg.tokenizer, vocab_size=args.vocab_size)
    except ValueError as e:
        raise ConfigError(f"--vocab-size {args.vocab_size}: {e}") from None
    if args.special_tokens is not None:
        items = [t.strip() for t in args.special_tokens.split(",")]
        try:
            cfg.tokenizer = replace(cfg.tokenizer, special_tokens=items)
        except (ConfigError, ValueError) as e:  # ValueError: vocab_size too small for them
            why = str(e).removeprefix("tokenizer.special_tokens: ")
            raise ConfigError(f"--special-tokens {args.special_tokens!r}: {why}") from None
    return cfg


def chunk_bytes_of(chunk_mb: float | None) -> int | None:
    """``--chunk-mb`` in bytes (None: planned by the run); a size that is not a positive number of at
    least a byte is one line."""
    if chunk_mb is None:
        return None
    if not math.isfinite(chunk_mb) or chunk_mb <= 0 or int(chunk_mb * (1 << 20)) < 1:
        raise ConfigError(f"--chunk-mb must be a positive number of MB, got {chunk_mb}")
    return int(chunk_mb * (1 << 20))


#: where Ray unpacks a job's ``--working-dir`` (and deletes it later): the job's working directory
RAY_WORKING_DIR_COPY = "/runtime_resources/working_dir_files/_ray_pkg_"


def check_out_outlives_job(out: str, cwd: str) -> None:
    """A relative ``--out`` in a Ray job's copy of its working directory would be written into that
    copy, which Ray deletes: nothing would reach the user. One line instead."""
    if RAY_WORKING_DIR_COPY in cwd and not is_url(out) and not Path(local_or_url(out)).is_absolute():
        raise ConfigError(
            f"--out {out}: a relative path here is inside this Ray job's copy of its working_dir ({cwd}), "
            "which Ray deletes; give an absolute path on storage the cluster's nodes share"
        )


def run(args: argparse.Namespace) -> int:
    from llmpipe.curate.executors import Executor, PoolExecutor
    from llmpipe.curate.pipeline import run_curate
    from llmpipe.curate.workdir import pyarrow_without_pandas
    from llmpipe.memory import tune_allocators

    cfg = config_from_args(args)
    progress = False if args.quiet else None  # None: a bar on a terminal, a line now and then in a log
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    chunk_bytes = chunk_bytes_of(args.chunk_mb)
    check_out_outlives_job(args.out, os.getcwd())
    out: Path | str = args.out if is_url(args.out) else Path(local_or_url(args.out))
    if args.work_dir is not None and not is_url(args.out):
        raise ConfigError("--work-dir is for a URL --out (a local --out holds its own work directory)")
    # forked workers share the imports of this process (PoolExecutor: spawned where that cannot be)
    pool = PoolExecutor(args.workers, progress=False, fork=True)  # the run reports its own progress
    executor: Executor = pool
    if args.ray is not None:  # '' too: RayExecutor says what an address is
        from llmpipe.distributed.executor import RayExecutor

        executor = RayExecutor(args.ray, progress=False)
        # Tasks on other nodes get these paths: they must not depend on the driver's working directory.
        out = out.resolve() if isinstance(out, Path) else out
        args.work_dir = args.work_dir.resolve() if args.work_dir is not None else None
        args.inputs = [x if is_url(x) else str(Path(local_or_url(x)).absolute()) for x in args.inputs]
    else:
        pyarrow_without_pandas()  # this process is the run's driver, its workers do the same
        tune_allocators()  # Arrow's pool and glibc's heap as llmpipe.memory says (the workers' too)
    tokenizer = args.tokenizer or (Path(cfg.tokenizer.file) if cfg.tokenizer.file else None)
    try:
        run_curate(
            args.inputs,
            out,
            cfg,
            tokenizer_file=tokenizer,
            strict=args.strict,
            executor=executor,
            keep_work=args.keep_work,
            chunk_bytes=chunk_bytes,
            progress=progress,
            staging=args.work_dir,
            follow_symlinks=args.follow_symlinks,
            overwrite=args.overwrite,
            log=lambda m: print(m, file=sys.stderr if os.environ.get("LLMPIPE_LOG_STDERR") else sys.stdout),
        )
    except BaseException:
        pool.close(abort=True)  # Ctrl-C or an error stops the workers now, not after their tasks
        raise
    finally:
        pool.close()
    return 0
