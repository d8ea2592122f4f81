"""Pack tokenised documents into fixed-length samples and write Arrow IPC shards."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from llmpipe import __version__
from llmpipe.data.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    TOKENIZER_FILE,
    atomic_write_json,
    sha256_file,
    shard_schema,
    token_dtype,
)


class ShardWriter:
    """Concatenate documents with EOS, cut them into samples of ``seq_len + 1`` tokens, write shards.

    Consecutive samples overlap by one token (the last target of one sample is the first input of
    the next), so no token is lost between samples. The last partial sample is padded with EOS and
    its ``valid`` column says how many tokens are real. Every ``val_every``-th sample goes to the
    validation split. Files appear by atomic rename; the manifest is written last.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        seq_len: int,
        vocab_size: int,
        eos_id: int,
        tokenizer_file: Path,
        samples_per_shard: int = 8192,
        val_fraction: float = 0.01,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        if seq_len < 2:
            raise ValueError("seq_len must be at least 2")
        self.out_dir = Path(out_dir)
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.eos_id = eos_id
        self.dtype = token_dtype(vocab_size)
        self.schema = shard_schema(seq_len, self.dtype)
        self.tokenizer_file = Path(tokenizer_file)
        self.samples_per_shard = samples_per_shard
        self.val_every = 0 if val_fraction <= 0 else max(2, round(1 / val_fraction))
        self.provenance = provenance or {}
        self._buf = np.zeros(0, dtype=self.dtype)
        self._pending: dict[str, list[np.ndarray]] = {s: [] for s in ("train", "val")}
        self._valid: dict[str, list[int]] = {s: [] for s in ("train", "val")}
        self._shards: dict[str, list[dict[str, Any]]] = {s: [] for s in ("train", "val")}
        self._sample_index = 0
        self.documents = 0
        self.tokens = 0
        self.padding = 0
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def add_documents(self, docs: Iterable[np.ndarray]) -> None:
        """Append documents (token ids without EOS) in order; EOS is added after each."""
        parts = [self._buf]
        eos = np.array([self.eos_id], dtype=self.dtype)
        for d in docs:
            parts.append(np.asarray(d).astype(self.dtype, copy=False))
            parts.append(eos)
            self.documents += 1
            self.tokens += len(d) + 1
        self._buf = np.concatenate(parts)
        width = self.seq_len + 1
        n = (len(self._buf) - 1) // self.seq_len if len(self._buf) >= width else 0
        if n:
            idx = np.arange(n)[:, None] * self.seq_len + np.arange(width)[None, :]
            self._emit(self._buf[idx], np.full(n, width, dtype=np.int32))
            self._buf = self._buf[n * self.seq_len :]

    def _emit(self, samples: np.ndarray, valid: np.ndarray) -> None:
        for row, v in zip(samples, valid, strict=True):
            is_val = self.val_every and self._sample_index % self.val_every == self.val_every - 1
            split = "val" if is_val else "train"
            self._sample_index += 1
            self._pending[split].append(row)
            self._valid[split].append(int(v))
            if len(self._pending[split]) >= self.samples_per_shard:
                self._flush(split)

    def _flush(self, split: str) -> None:
        rows = self._pending[split]
        if not rows:
            return
        valid = np.array(self._valid[split], dtype=np.int32)
        tokens = np.stack(rows).astype(self.dtype, copy=False)
        self._pending[split] = []
        self._valid[split] = []
        name = f"{split}-{len(self._shards[split]):05d}.arrow"
        path = self.out_dir / name
        flat = pa.array(tokens.reshape(-1), type=self.schema.field("tokens").type.value_type)
        table = pa.table(
            {
                "tokens": pa.FixedSizeListArray.from_arrays(flat, self.seq_len + 1),
                "valid": pa.array(valid, type=pa.int32()),
            },
            schema=self.schema,
        )
        tmp = path.with_name(f".{name}.tmp-{os.getpid()}")
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, self.schema) as w:
            w.write_table(table)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._shards[split].append(
            {
                "file": name,
                "rows": int(table.num_rows),
                "tokens": int(valid.sum()),
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path),
            }
        )

    def close(self) -> dict[str, Any]:
        """Pad and write the last sample, flush every split, write manifest.json last."""
        if len(self._buf) > 1:
            width = self.seq_len + 1
            valid = len(self._buf)
            row = np.full(width, self.eos_id, dtype=self.dtype)
            row[:valid] = self._buf
            self.padding += width - valid
            self._emit(row[None, :], np.array([valid], dtype=np.int32))
        self._buf = np.zeros(0, dtype=self.dtype)
        for split in ("train", "val"):
            self._flush(split)
        tok_path = self.out_dir / TOKENIZER_FILE
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "llmpipe_version": __version__,
            "seq_len": self.seq_len,
            "dtype": self.dtype.name,
            "tokenizer": {
                "file": TOKENIZER_FILE,
                "sha256": sha256_file(tok_path) if tok_path.exists() else None,
                "vocab_size": self.vocab_size,
                "eos_id": self.eos_id,
            },
            "counts": {
                "documents": self.documents,
                "tokens": self.tokens,
                "padding_tokens": self.padding,
                "samples": self._sample_index,
            },
            "splits": {
                split: {
                    "rows": sum(s["rows"] for s in shards),
                    "tokens": sum(s["tokens"] for s in shards),
                    "shards": shards,
                }
                for split, shards in self._shards.items()
            },
            "provenance": self.provenance,
        }
        atomic_write_json(self.out_dir / MANIFEST, manifest)
        return manifest


def expected_samples(total_tokens: int, seq_len: int) -> int:
    """Samples produced for a stream of ``total_tokens`` tokens (overlap of one between samples)."""
    if total_tokens <= 1:
        return 0
    return math.ceil((total_tokens - 1) / seq_len)
