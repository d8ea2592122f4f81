"""A memory-mapped, checksummed view of one split of a shard directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from llmpipe.data.format import (
    check_tokenizer,
    damaged_blocks,
    describe_ranges,
    fast_fingerprint,
    read_manifest,
    sha256_file,
)
from llmpipe.errors import InputError, ShardError

Verify = Literal["blocks", "full", "fast", "none"]
VERIFY_MODES: tuple[Verify, ...] = ("blocks", "full", "fast", "none")


class ShardDataset:
    """All samples of one split, memory-mapped; ``ds[i]`` is a read-only array of ``seq_len + 1`` ids.

    ``verify`` checks each shard against the manifest when the dataset opens: ``full`` the sha256 of
    every byte; ``blocks`` the CRC-32 of every 1 MiB block (every byte too, several times faster, and
    a mismatch names the byte range); ``fast`` the size and a sha256 of the first and last MiB only (a
    byte changed in the middle of a shard over 2 MiB goes unnoticed); ``none`` nothing. A manifest
    without block checksums (older llmpipe) is checked as ``fast`` under ``blocks``, and ``notices``
    says so in one line.
    """

    def __init__(
        self,
        directory: str | Path,
        split: str = "train",
        *,
        verify: Verify = "full",
        expect_seq_len: int | None = None,
        expect_tokenizer_sha256: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.manifest: dict[str, Any] = read_manifest(self.directory)
        m = self.manifest
        if split not in m["splits"]:
            raise ShardError(f"{self.directory}: no split {split!r} (have {sorted(m['splits'])})")
        self.split = split
        self.seq_len: int = m["seq_len"]
        self.vocab_size: int = m["tokenizer"]["vocab_size"]
        self.eos_id: int = m["tokenizer"]["eos_id"]
        self.tokenizer_sha256: str | None = m["tokenizer"]["sha256"]
        #: special tokens the curate run reserved (``--special-tokens``) -> their ids; empty if none
        self.special_tokens: dict[str, int] = dict(m["tokenizer"].get("special_tokens", {}))
        if expect_seq_len is not None and expect_seq_len != self.seq_len:
            raise ShardError(
                f"{self.directory}: shards hold seq_len={self.seq_len} but the run expects {expect_seq_len}"
            )
        if expect_tokenizer_sha256 is not None and expect_tokenizer_sha256 != self.tokenizer_sha256:
            raise ShardError(
                f"{self.directory}: shards were tokenised with tokenizer sha256 {self.tokenizer_sha256}, "
                f"the run expects {expect_tokenizer_sha256}"
            )
        if verify not in VERIFY_MODES:
            raise ShardError(f"verify must be one of {', '.join(VERIFY_MODES)}, not {verify!r}")
        if verify != "none":
            check_tokenizer(self.directory, m)
        self.notices: list[str] = []
        without_blocks = 0
        self._arrays: list[np.ndarray] = []
        self._valid: list[np.ndarray] = []
        for entry in m["splits"][split]["shards"]:
            path = self.directory / entry["file"]
            if not path.is_file():
                raise ShardError(f"{path}: listed in the manifest but missing")
            if verify == "full" and sha256_file(path) != entry["sha256"]:
                raise ShardError(f"{path}: sha256 mismatch (corrupted or modified shard)")
            if verify in ("fast", "blocks") and path.stat().st_size != entry["bytes"]:
                raise ShardError(f"{path}: size {path.stat().st_size} != {entry['bytes']} in the manifest")
            damaged = damaged_blocks(path, entry) if verify == "blocks" else None
            if damaged:
                raise ShardError(
                    f"{path}: {describe_ranges(damaged)} differ from the manifest's block checksums "
                    "(corrupted shard)"
                )
            fallback = verify == "blocks" and damaged is None  # no block checksums: as fast
            without_blocks += int(fallback)
            if verify == "fast" or fallback:
                want = entry.get("fast_sha256")
                if want is not None and fast_fingerprint(path) != want:
                    raise ShardError(f"{path}: fast checksum mismatch (corrupted shard)")
            tokens, valid = self._map(path, entry)
            self._arrays.append(tokens)
            self._valid.append(valid)
        if without_blocks:
            self.notices.append(
                f"{self.directory}: the manifest has no block checksums (shards written by an older "
                "llmpipe), so verify=blocks checks them as verify=fast (size, first and last MiB); "
                f"`llmpipe inspect {self.directory} --verify` checks every byte"
            )
        sizes = [len(a) for a in self._arrays]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def _map(self, path: Path, entry: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        try:
            source = pa.memory_map(str(path), "r")
            table = ipc.open_file(source).read_all()
        except (pa.ArrowInvalid, OSError) as e:
            raise ShardError(f"{path}: not a readable Arrow IPC file ({e})") from e
        if table.num_rows != entry["rows"]:
            raise ShardError(f"{path}: {table.num_rows} rows, manifest says {entry['rows']}")
        col = table.column("tokens").combine_chunks()
        width = self.seq_len + 1
        if col.type.list_size != width:
            raise ShardError(f"{path}: rows of {col.type.list_size} tokens, manifest seq_len+1 = {width}")
        flat = col.values.to_numpy(zero_copy_only=True)  # a view into the memory map
        valid = table.column("valid").combine_chunks().to_numpy(zero_copy_only=True)
        return flat.reshape(-1, width), valid

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def require_samples(self, hint: str) -> None:
        """An InputError (one line, ending in ``hint``: what to pass instead) when the split is empty, as
        the val split of a curate run without one is."""
        if len(self) == 0:
            raise InputError(
                f"{self.directory}: its {self.split} split holds no samples (curate puts every "
                f"1/pack.val_fraction-th sample in val: none with val_fraction 0, or with fewer samples than "
                f"that); {hint}"
            )

    @property
    def token_buffers(self) -> list[np.ndarray]:
        """Each shard's token ids, flat (``rows * (seq_len + 1)``), views into the memory maps."""
        return [a.reshape(-1) for a in self._arrays]

    @property
    def valid_buffers(self) -> list[np.ndarray]:
        """Each shard's int32 count of real tokens per row."""
        return self._valid

    def _locate(self, i: int) -> tuple[int, int]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        shard = int(np.searchsorted(self._offsets, i, side="right") - 1)
        return shard, i - int(self._offsets[shard])

    def __getitem__(self, i: int) -> np.ndarray:
        shard, row = self._locate(int(i))
        return self._arrays[shard][row]

    def valid(self, i: int) -> int:
        shard, row = self._locate(int(i))
        return int(self._valid[shard][row])

    def gather(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows for many indices at once: (tokens [n, seq_len+1] int64, valid [n])."""
        shards = np.searchsorted(self._offsets, indices, side="right") - 1
        out = np.empty((len(indices), self.seq_len + 1), dtype=np.int64)
        valid = np.empty(len(indices), dtype=np.int64)
        for s in np.unique(shards):
            sel = np.flatnonzero(shards == s)
            rows = indices[sel] - self._offsets[s]
            out[sel] = self._arrays[s][rows]
            valid[sel] = self._valid[s][rows]
        return out, valid
