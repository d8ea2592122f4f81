"""Check a shard directory against its manifest: files, sizes, checksums, schema, rows, token ranges.

Used by ``llmpipe inspect DIR --verify``; every problem is reported (not only the first one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from llmpipe.data.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SPLITS,
    TOKENIZER_FILE,
    damaged_blocks,
    describe_ranges,
    read_manifest,
    sha256_file,
)


@dataclass
class Report:
    """What verification found: problems (any one makes the directory invalid) and what was checked."""

    problems: list[str] = field(default_factory=list)
    checked_shards: int = 0
    checked_tokens: int = 0
    #: shards whose manifest entry records no block checksums (written by an older llmpipe)
    without_blocks: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_directory(directory: str | Path) -> Report:
    """Verify every shard listed in ``directory/manifest.json``; never raises for a bad shard."""
    directory = Path(directory)
    rep = Report()
    manifest = read_manifest(directory)  # a missing or foreign manifest is an error, not a report
    tok = manifest["tokenizer"]
    tok_path = directory / tok.get("file", TOKENIZER_FILE)
    if not tok_path.is_file():
        rep.problems.append(f"{tok_path}: tokenizer file listed in the manifest is missing")
    elif tok.get("sha256") is not None and sha256_file(tok_path) != tok["sha256"]:
        rep.problems.append(f"{tok_path}: sha256 differs from the manifest's tokenizer.sha256")
    seq_len = int(manifest["seq_len"])
    vocab = int(tok["vocab_size"])
    total_rows = 0
    total_tokens = 0
    for split in SPLITS:
        info = manifest["splits"].get(split)
        if info is None:
            rep.problems.append(f"manifest: split {split!r} missing")
            continue
        rows = tokens = 0
        for entry in info["shards"]:
            r, t = _verify_shard(directory / entry["file"], entry, seq_len, vocab, manifest["dtype"], rep)
            rows += r
            tokens += t
        if rows != info.get("rows"):
            rep.problems.append(f"split {split}: {rows} rows in the shards, manifest says {info.get('rows')}")
        if tokens != info.get("tokens"):
            rep.problems.append(
                f"split {split}: {tokens} tokens in the shards, manifest says {info.get('tokens')}"
            )
        total_rows += rows
        total_tokens += tokens
    counts = manifest["counts"]
    if total_rows != counts.get("samples"):
        rep.problems.append(
            f"{total_rows} samples in the shards, manifest counts.samples = {counts.get('samples')}"
        )
    # concat: consecutive samples overlap by one token, so real tokens = sum(valid) - (samples - 1);
    # best_fit: rows do not overlap
    overlap = max(total_rows - 1, 0) if manifest.get("packing", "concat") == "concat" else 0
    stream = total_tokens - overlap
    if total_rows and stream != counts.get("tokens"):
        rep.problems.append(
            f"the shards hold a stream of {stream} tokens, manifest counts.tokens = {counts.get('tokens')}"
        )
    listed = {e["file"] for s in manifest["splits"].values() for e in s["shards"]}
    for f in sorted(directory.glob("*.arrow")):
        if f.name not in listed:
            rep.problems.append(f"{f}: shard file not listed in the manifest (stale or foreign)")
    return rep


def _verify_shard(
    path: Path, entry: dict[str, Any], seq_len: int, vocab: int, dtype: str, rep: Report
) -> tuple[int, int]:
    rep.checked_shards += 1
    if not path.is_file():
        rep.problems.append(f"{path}: listed in the manifest but missing")
        return 0, 0
    size = path.stat().st_size
    if size != entry["bytes"]:
        rep.problems.append(f"{path}: {size} bytes, manifest says {entry['bytes']}")
    damaged = damaged_blocks(path, entry)  # where the damage is, when the manifest can tell
    if damaged is None:
        rep.without_blocks += 1
    if sha256_file(path) != entry["sha256"]:
        where = f" at {describe_ranges(damaged)} (block checksums)" if damaged else ""
        rep.problems.append(f"{path}: sha256 mismatch{where} (corrupted or modified shard)")
    elif damaged:
        rep.problems.append(f"{path}: {describe_ranges(damaged)} differ from the manifest's block checksums")
    try:
        with pa.memory_map(str(path), "r") as src:
            reader = ipc.open_file(src)
            meta = reader.schema.metadata or {}
            table = reader.read_all()
    except (pa.ArrowInvalid, OSError) as e:
        rep.problems.append(f"{path}: not a readable Arrow IPC file ({e})")
        return 0, 0
    if (
        meta.get(b"llmpipe.format") != FORMAT_NAME.encode()
        or meta.get(b"llmpipe.format_version") != str(FORMAT_VERSION).encode()
    ):
        rep.problems.append(f"{path}: schema metadata is not llmpipe shard format v{FORMAT_VERSION}")
    if table.num_rows != entry["rows"]:
        rep.problems.append(f"{path}: {table.num_rows} rows, manifest says {entry['rows']}")
    ttype = table.schema.field("tokens").type if "tokens" in table.schema.names else None
    if not isinstance(ttype, pa.FixedSizeListType) or ttype.list_size != seq_len + 1:
        rep.problems.append(f"{path}: tokens column is {ttype}, expected fixed_size_list[{seq_len + 1}]")
        return table.num_rows, 0
    if str(ttype.value_type) != dtype:
        rep.problems.append(f"{path}: token type {ttype.value_type}, manifest dtype {dtype}")
    flat = table.column("tokens").combine_chunks().values.to_numpy(zero_copy_only=False)
    valid = table.column("valid").to_numpy()
    if len(flat) and int(flat.max()) >= vocab:
        rep.problems.append(f"{path}: token id {int(flat.max())} >= vocab_size {vocab}")
    if len(valid) and (valid.min() < 1 or valid.max() > seq_len + 1):
        rep.problems.append(f"{path}: valid counts outside [1, {seq_len + 1}]")
    tokens = int(np.asarray(valid, dtype=np.int64).sum())
    if tokens != entry["tokens"]:
        rep.problems.append(f"{path}: {tokens} tokens, manifest says {entry['tokens']}")
    rep.checked_tokens += tokens
    return table.num_rows, tokens
