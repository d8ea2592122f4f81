"""Pack tokenised documents into fixed-length samples and write Arrow IPC shards."""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from llmpipe import __version__
from llmpipe.data.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    TOKENIZER_FILE,
    atomic_write_json,
    dual_ipc_bytes,
    fast_fingerprint,
    sha256_file,
    shard_schema,
    token_dtype,
)

PACKINGS = ("concat", "best_fit")


class ShardWriter:
    """Pack documents (each followed by EOS) into samples of ``seq_len + 1`` tokens and write shards.

    ``packing="concat"``: one stream cut into samples; consecutive samples overlap by one token (the
    last target of one sample is the first input of the next), so no token is lost between samples
    and only the very last sample is padded. ``packing="best_fit"``: documents are not split unless
    longer than a sample; within a window of ``best_fit_window`` samples' worth of documents, pieces
    are placed best-fit decreasing into samples that are padded with EOS (deterministic; no overlap).
    Either way ``valid`` says how many tokens of a row are real. Every ``val_every``-th sample goes to
    the validation split. Files appear by atomic rename; the manifest is written last.
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
        packing: str = "concat",
        best_fit_window: int = 512,
    ) -> None:
        if seq_len < 2:
            raise ValueError("seq_len must be at least 2")
        if packing not in PACKINGS:
            raise ValueError(f"packing must be one of {PACKINGS}, not {packing!r}")
        self.packing = packing
        self.best_fit_window = max(1, best_fit_window)
        self._pool: list[np.ndarray] = []
        self._pool_tokens = 0
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
        if self.packing == "best_fit":
            self._add_best_fit(docs)
            return
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

    def _add_best_fit(self, docs: Iterable[np.ndarray]) -> None:
        width = self.seq_len + 1
        eos = np.array([self.eos_id], dtype=self.dtype)
        for d in docs:
            doc = np.concatenate([np.asarray(d).astype(self.dtype, copy=False), eos])
            self.documents += 1
            self.tokens += len(doc)
            for start in range(0, len(doc), width):  # a document longer than a sample is cut
                self._pool.append(doc[start : start + width])
                self._pool_tokens += min(width, len(doc) - start)
            if self._pool_tokens >= self.best_fit_window * width:
                self._drain_pool()

    def _drain_pool(self) -> None:
        """Best-fit decreasing over the pooled pieces; bins are emitted in the order they opened."""
        width = self.seq_len + 1
        order = sorted(range(len(self._pool)), key=lambda i: (-len(self._pool[i]), i))
        bins: list[list[int]] = []
        free: list[tuple[int, int]] = []  # (space left, bin index), sorted
        for i in order:
            n = len(self._pool[i])
            at = bisect.bisect_left(free, (n, -1))
            if at < len(free):
                space, b = free.pop(at)
                bins[b].append(i)
                if space - n > 0:
                    bisect.insort(free, (space - n, b))
            else:
                bins.append([i])
                if width - n > 0:
                    bisect.insort(free, (width - n, len(bins) - 1))
        rows = np.full((len(bins), width), self.eos_id, dtype=self.dtype)
        valid = np.zeros(len(bins), dtype=np.int32)
        for b, members in enumerate(bins):
            row = np.concatenate([self._pool[i] for i in sorted(members)])
            rows[b, : len(row)] = row
            valid[b] = len(row)
            self.padding += width - len(row)
        self._pool, self._pool_tokens = [], 0
        self._emit(rows, valid)

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
        with open(tmp, "wb") as f:
            f.write(dual_ipc_bytes(table, self.schema))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._shards[split].append(
            {
                "file": name,
                "rows": int(table.num_rows),
                "tokens": int(valid.sum()),
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path),
                "fast_sha256": fast_fingerprint(path),
            }
        )

    def close(self) -> dict[str, Any]:
        """Pad and write the last sample, flush every split, write manifest.json last."""
        if self._pool:
            self._drain_pool()
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
            "packing": self.packing,
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
