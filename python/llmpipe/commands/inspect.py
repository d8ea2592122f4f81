"""``llmpipe inspect DIR [--verify]``: what a shard directory holds, a decoded sample, checksums."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from llmpipe.argtypes import int_at_least
from llmpipe.data.format import read_manifest
from llmpipe.errors import InputError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "inspect",
        help="summarise a shard directory, decode a sample, verify checksums",
        description=(
            "Print the manifest summary of a shard directory written by `llmpipe curate` and decode a "
            "sample. With --verify, check every shard against the manifest (size, sha256, per-block CRC-32 "
            "naming a damaged byte range, schema, rows, token ranges) and the tokenizer's sha256; exit 1 on "
            "any mismatch."
        ),
    )
    p.add_argument("directory", type=Path, metavar="DIR", help="shard directory")
    p.add_argument("--verify", action="store_true", help="verify every shard; non-zero exit on mismatch")
    p.add_argument(
        "--sample", type=int_at_least(0), default=0, metavar="I", help="index of the train sample to decode"
    )
    p.add_argument(
        "--chars", type=int_at_least(1), default=400, metavar="N", help="characters of decoded text to show"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def summary(directory: Path) -> dict[str, Any]:
    m = read_manifest(directory)
    return {
        "directory": str(directory),
        "format_version": m["format_version"],
        "llmpipe_version": m.get("llmpipe_version"),
        "seq_len": m["seq_len"],
        "dtype": m["dtype"],
        "tokenizer": m["tokenizer"],
        "counts": m["counts"],
        "splits": {
            s: {"rows": v["rows"], "tokens": v["tokens"], "shards": len(v["shards"])}
            for s, v in m["splits"].items()
        },
    }


def _decoded_sample(directory: Path, index: int, chars: int) -> str | None:
    from llmpipe.data.dataset import ShardDataset
    from llmpipe.tokenizer import Tokenizer

    ds = ShardDataset(directory, "train", verify="none")
    if len(ds) == 0:
        return None
    if index >= len(ds):
        raise InputError(f"--sample {index}: the train split has {len(ds):,} samples (0 to {len(ds) - 1:,})")
    row = ds[index][: ds.valid(index)]
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    text = tok.decode([int(t) for t in row])
    return text if len(text) <= chars else text[:chars] + " ..."


def run(args: argparse.Namespace) -> int:
    from llmpipe.data.verify import verify_directory

    directory: Path = args.directory
    info = summary(directory)
    if args.json:
        out: dict[str, Any] = dict(info)
        if args.verify:
            rep = verify_directory(directory)
            out["verify"] = {
                "ok": rep.ok,
                "problems": rep.problems,
                "shards": rep.checked_shards,
                "shards_without_block_checksums": rep.without_blocks,
            }
        print(json.dumps(out, indent=2))
        return 0 if not args.verify or out["verify"]["ok"] else 1
    c = info["counts"]
    t = info["tokenizer"]
    print(
        f"{directory}: llmpipe shards v{info['format_version']} (written by llmpipe {info['llmpipe_version']})"
    )
    print(
        f"  seq_len {info['seq_len']}, dtype {info['dtype']}, vocab {t['vocab_size']}, eos id {t['eos_id']}"
    )
    print(f"  tokenizer {t['file']} sha256 {t['sha256']}")
    if t.get("special_tokens"):  # reserved by curate --special-tokens
        pairs = sorted(t["special_tokens"].items(), key=lambda kv: kv[1])
        shown = ", ".join(f"{k} {v}" for k, v in pairs[:4]) + (", ..." if len(pairs) > 4 else "")
        print(f"  {len(pairs)} reserved special tokens: {shown}")
    print(
        f"  {c['documents']:,} documents, {c['tokens']:,} tokens (EOS included), {c['samples']:,} samples, "
        f"{c['padding_tokens']:,} padding tokens"
    )
    for split, s in info["splits"].items():
        print(f"  {split:5s}: {s['rows']:,} samples, {s['tokens']:,} tokens in {s['shards']} shard(s)")
    report = verify_directory(directory) if args.verify else None
    if report is None or report.ok:  # decode only what verified (or was not asked to be verified)
        sample = _decoded_sample(directory, args.sample, args.chars)
        if sample is not None:
            print(f"\n  train sample {args.sample}, decoded:\n  {sample!r}\n")
    if report is None:
        return 0
    if report.ok:
        older = f"; {report.without_blocks} without block checksums" if report.without_blocks else ""
        print(
            f"verify: OK ({report.checked_shards} shard(s), sha256 and block checksums{older}, schema, rows, "
            "token ranges, tokenizer)"
        )
        return 0
    for p in report.problems:
        print(f"verify: FAIL {p}")
    print(f"verify: {len(report.problems)} problem(s) in {directory}")
    return 1
