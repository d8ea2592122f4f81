"""Pack tokenised documents into fixed-length samples and write Arrow IPC shards."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from llmpipe import __version__, _core
from llmpipe.data.format import (
    BLOCK_BYTES,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    TOKENIZER_FILE,
    atomic_write_json,
    dual_ipc_pieces,
    fast_fingerprint,
    file_block_crc32s,
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
    the validation split. Files appear by atomic rename; the manifest is written last. Packing runs
    in Rust (llmpipe-shard), one call per batch of documents.
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
        special_tokens: dict[str, int] | None = None,  # reserved special tokens -> id, for the manifest
    ) -> None:
        if seq_len < 2:
            raise ValueError("seq_len must be at least 2")
        if packing not in PACKINGS:
            raise ValueError(f"packing must be one of {PACKINGS}, not {packing!r}")
        if best_fit_window < 1:  # never clamped: another window packs other samples
            raise ValueError(f"best_fit_window must be at least 1, not {best_fit_window}")
        self.packing = packing
        self.best_fit_window = best_fit_window
        self.out_dir = Path(out_dir)
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.eos_id = eos_id
        self.special_tokens = dict(special_tokens or {})
        self.dtype = token_dtype(vocab_size)
        self.schema = shard_schema(seq_len, self.dtype)
        self.tokenizer_file = Path(tokenizer_file)
        self.samples_per_shard = samples_per_shard
        self.val_every = 0 if val_fraction <= 0 else max(2, round(1 / val_fraction))
        self.provenance = provenance or {}
        self._packer = _core.SamplePacker(
            seq_len, eos_id, self.dtype.name, packing=packing, best_fit_window=self.best_fit_window
        )
        # each split's next shard, filled in place (allocated on first use): memory per split is one
        # shard's samples, whatever the input
        self._pending: dict[str, np.ndarray | None] = {s: None for s in ("train", "val")}
        self._valid: dict[str, np.ndarray | None] = {s: None for s in ("train", "val")}
        self._pending_rows = {s: 0 for s in ("train", "val")}
        self._shards: dict[str, list[dict[str, Any]]] = {s: [] for s in ("train", "val")}
        self._sample_index = 0
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def add_documents(self, docs: Iterable[np.ndarray]) -> None:
        """Append documents (token ids without EOS) in order; EOS is added after each."""
        arrays = [np.asarray(d) for d in docs]
        lengths = np.fromiter((len(d) for d in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.uint32)
        self.add_flat(flat, offsets)

    def add_flat(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        """Append documents ``ids[offsets[i]:offsets[i + 1]]`` in order (one Rust call per batch)."""
        ids = np.asarray(ids)
        fits = ids.dtype.kind == "u" and ids.dtype.itemsize <= 4  # the tokenizer's uint32: no scan
        if not fits and ids.size and (ids.min() < 0 or ids.max() >= 2**32):
            raise ValueError("token ids must be in [0, 2**32)")
        rows, valid = self._packer.add(
            np.ascontiguousarray(ids, dtype=np.uint32), np.ascontiguousarray(offsets, dtype=np.int64)
        )
        self._emit(rows, valid)

    @property
    def documents(self) -> int:
        return int(self._packer.counts[0])

    @property
    def tokens(self) -> int:
        return int(self._packer.counts[1])

    @property
    def padding(self) -> int:
        return int(self._packer.counts[2])

    def _emit(self, rows_buf: Any, valid_buf: Any) -> None:
        """Route packed samples to the splits (every ``val_every``-th sample is validation)."""
        valid = np.frombuffer(valid_buf, dtype=np.int32)
        if not len(valid):
            return
        rows = np.frombuffer(rows_buf, dtype=self.dtype).reshape(len(valid), self.seq_len + 1)
        index = self._sample_index + np.arange(len(valid))
        self._sample_index += len(valid)
        is_val = (
            (index % self.val_every == self.val_every - 1) if self.val_every else np.zeros(len(valid), bool)
        )
        for split, sel in (("train", ~is_val), ("val", is_val)):
            at = np.flatnonzero(sel)
            while len(at):
                room = self.samples_per_shard - self._pending_rows[split]
                take, at = at[:room], at[room:]
                pending, pvalid = self._pending[split], self._valid[split]
                if pending is None or pvalid is None:
                    pending = np.empty((self.samples_per_shard, self.seq_len + 1), dtype=self.dtype)
                    pvalid = np.empty(self.samples_per_shard, dtype=np.int32)
                    self._pending[split], self._valid[split] = pending, pvalid
                start = self._pending_rows[split]
                np.take(rows, take, axis=0, out=pending[start : start + len(take)])
                pvalid[start : start + len(take)] = valid[take]
                self._pending_rows[split] += len(take)
                if self._pending_rows[split] >= self.samples_per_shard:
                    self._flush(split)

    def _flush(self, split: str) -> None:
        n = self._pending_rows[split]
        pending, pvalid = self._pending[split], self._valid[split]
        if not n or pending is None or pvalid is None:
            return
        valid = pvalid[:n]
        self._pending_rows[split] = 0
        name = f"{split}-{len(self._shards[split]):05d}.arrow"
        path = self.out_dir / name
        # zero-copy views of the shard buffer: it is refilled only after this shard is written
        flat = pa.array(pending[:n].reshape(-1), type=self.schema.field("tokens").type.value_type)
        table = pa.table(
            {
                "tokens": pa.FixedSizeListArray.from_arrays(flat, self.seq_len + 1),
                "valid": pa.array(valid, type=pa.int32()),
            },
            schema=self.schema,
        )
        tmp = path.with_name(f".{name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            for piece in dual_ipc_pieces(table, self.schema):
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        del table, flat
        os.replace(tmp, path)
        self._shards[split].append(
            {
                "file": name,
                "rows": n,
                "tokens": int(valid.sum()),
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path),
                "fast_sha256": fast_fingerprint(path),
                "block_bytes": BLOCK_BYTES,
                "block_crc32": file_block_crc32s(path, BLOCK_BYTES).tolist(),
            }
        )

    def close(self) -> dict[str, Any]:
        """Pack what is left (the last, padded sample), flush every split, write manifest.json last."""
        self._emit(*self._packer.finish())
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
                # only when some are reserved: shards without them keep their bytes
                **({"special_tokens": self.special_tokens} if self.special_tokens else {}),
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
