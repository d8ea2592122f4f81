"""The shard directory format shared by the pack stage (writer) and the training loader (reader).

A shard directory holds:

    manifest.json          format version, tokenizer sha256, seq_len, dtype, counts, splits, provenance
    tokenizer.json         the tokenizer the tokens were produced with
    train-00000.arrow ...  Arrow IPC *file* format, uncompressed (memory-mapped zero-copy)
    val-00000.arrow ...
    stats.json, report.html  the curation funnel

Each shard is a table with one row per training sample:

    tokens  fixed_size_list<uint16|uint32>[seq_len + 1]   input = tokens[:-1], target = tokens[1:]
    valid   int32                                           real tokens in the row; the rest is padding

Documents are joined with EOS; a token after an EOS starts a new document, which is what the trainer
uses to mask attention across documents.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

FORMAT_NAME = "llmpipe-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
SPLITS = ("train", "val")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def shard_schema(seq_len: int, dtype: np.dtype) -> pa.Schema:
    value = pa.uint16() if dtype == np.uint16 else pa.uint32()
    return pa.schema(
        [("tokens", pa.list_(value, seq_len + 1)), ("valid", pa.int32())],
        metadata={"llmpipe.format": FORMAT_NAME, "llmpipe.format_version": str(FORMAT_VERSION)},
    )


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory, fsync, then rename: never half-written."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def read_manifest(directory: Path) -> dict[str, Any]:
    from llmpipe.errors import ShardError

    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise ShardError(
            f"{directory}: no {MANIFEST}; is this a shard directory written by `llmpipe curate`?"
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ShardError(f"{path}: not valid JSON ({e})") from e
    if manifest.get("format") != FORMAT_NAME:
        raise ShardError(f"{path}: not an llmpipe shard manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ShardError(
            f"{path}: format version {manifest.get('format_version')} (this llmpipe reads {FORMAT_VERSION})"
        )
    return manifest
