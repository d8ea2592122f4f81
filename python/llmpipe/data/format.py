"""The shard directory format shared by the pack stage (writer) and the training loader (reader).

A shard directory holds:

    manifest.json          format version, tokenizer sha256, seq_len, dtype, counts, splits, provenance
    tokenizer.json         the tokenizer the tokens were produced with
    train-00000.arrow ...  Arrow IPC, uncompressed (memory-mapped zero-copy), laid out so that both the
    val-00000.arrow ...    *file* reader (pyarrow.ipc.open_file) and the *stream* reader (pyarrow.ipc.
                           open_stream, which HF ``datasets.Dataset.from_file`` uses) open it: the IPC
                           stream, then the file footer and trailing magic (see ``dual_ipc_bytes``)
    stats.json, report.html  the curation funnel

Each shard's manifest entry records its size, sha256 (``full`` check), a sha256 of its size and first
and last MiB (``fast`` check), and ``block_bytes`` + ``block_crc32``: the CRC-32 (zlib's) of every
``block_bytes``-byte piece of the file (``blocks`` check: every byte, at CRC speed; a mismatch names
the damaged byte range). Manifests written before block checksums existed lack the last two keys.

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
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

FORMAT_NAME = "llmpipe-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
#: the longest sample llmpipe packs (``llmpipe.curate.settings.MAX_SEQ_LEN``): a manifest's seq_len is no longer
MAX_SEQ_LEN = 1 << 20
#: the token id types of a shard, and the most ids each holds (a manifest's vocab_size is no larger)
DTYPE_IDS = {"uint16": 1 << 16, "uint32": 1 << 32}
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


_FAST_BYTES = 1 << 20


def fast_fingerprint(path: Path) -> str:
    """sha256 of size + first and last MiB: catches truncation and most corruption in O(1)."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(_FAST_BYTES))
        if size > _FAST_BYTES:
            f.seek(max(_FAST_BYTES, size - _FAST_BYTES))
            h.update(f.read())
    return h.hexdigest()


BLOCK_BYTES = 1 << 20


def block_crc32s(data: Any, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """CRC-32 of each ``block_bytes`` piece of a bytes-like ``data`` (uint32, computed in parallel)."""
    from llmpipe import _core

    view = np.frombuffer(data, dtype=np.uint8)
    if not len(view):
        return np.zeros(0, dtype=np.uint32)
    return np.frombuffer(_core.crc32_blocks(view, block_bytes), dtype="<u4").astype(np.uint32)


#: bytes ``file_block_crc32s`` reads at a time (whole blocks; at least one)
CRC_READ_BYTES = 8 << 20


def file_block_crc32s(path: Path, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """``block_crc32s`` of a file's bytes, read a few blocks at a time into one buffer (a memory map
    would count the whole file in the process's resident memory)."""
    step = max(1, CRC_READ_BYTES // block_bytes) * block_bytes
    buf = bytearray(step)
    out = []
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            out.append(block_crc32s(memoryview(buf)[:n], block_bytes))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint32)


def damaged_blocks(path: Path, entry: dict[str, Any]) -> list[tuple[int, int]] | None:
    """Byte ranges ``[start, end)`` of ``path`` whose CRC-32 differs from the manifest entry's
    ``block_crc32`` (a file of another size differs in its last blocks at least); None when the entry
    records no block checksums (a manifest written before they existed)."""
    want = entry.get("block_crc32")
    block = entry.get("block_bytes")
    if want is None or block is None:
        return None
    size = path.stat().st_size
    got = file_block_crc32s(path, int(block))
    want = np.asarray(want, dtype=np.uint32)
    k = min(len(got), len(want))
    bad = set(np.flatnonzero(got[:k] != want[:k]).tolist())
    if len(got) != len(want) or size != int(entry.get("bytes", size)):
        # cut short or grown: from the last common block on, nothing matches what was written
        bad |= set(range(max(k - 1, 0), max(len(got), len(want))))
    end = max(size, int(entry.get("bytes", size)))
    return [(b * int(block), min((b + 1) * int(block), end)) for b in sorted(bad)]


def describe_ranges(ranges: list[tuple[int, int]]) -> str:
    """``bytes 1048576-2097151`` (inclusive; adjacent blocks merged), with a count of further ranges."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and merged[-1][1] == start:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    more = f" and {len(merged) - 1} more range(s)" if len(merged) > 1 else ""
    return f"bytes {merged[0][0]}-{merged[0][1] - 1}{more}"


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
    stays_inside(path, directory, ShardError)
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ShardError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ShardError(f"{path}: not an llmpipe shard manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ShardError(
            f"{path}: format version {manifest.get('format_version')} (this llmpipe reads {FORMAT_VERSION})"
        )
    missing = [k for k in ("seq_len", "dtype", "tokenizer", "counts", "splits") if k not in manifest]
    if missing:
        raise ShardError(f"{path}: the manifest has no {', '.join(missing)} (damaged or hand-edited?)")
    if not isinstance(manifest["splits"], dict) or not isinstance(manifest["tokenizer"], dict):
        raise ShardError(f"{path}: the manifest's splits and tokenizer must be mappings")
    _check_fields(manifest, path)
    if "file" in manifest["tokenizer"]:
        plain_file_name(manifest["tokenizer"]["file"], f"{path}: tokenizer.file")
    reserved = manifest["tokenizer"].get("special_tokens", {})
    if not isinstance(reserved, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in reserved.items()
    ):
        raise ShardError(f"{path}: tokenizer.special_tokens must map token strings to ids")
    for split, entry in manifest["splits"].items():
        shards = entry.get("shards") if isinstance(entry, dict) else None
        if not isinstance(shards, list) or not all(isinstance(x, dict) and "file" in x for x in shards):
            raise ShardError(f"{path}: splits.{split}.shards must be a list of entries with a file name")
        for shard in shards:
            stays_inside(
                Path(directory) / plain_file_name(shard["file"], f"{path}: splits.{split}.shards"),
                directory,
                ShardError,
            )
    for name in {manifest["tokenizer"].get("file", TOKENIZER_FILE), TOKENIZER_FILE}:
        stays_inside(Path(directory) / name, directory, ShardError)
    return manifest


def stays_inside(path: Path, directory: Path, error: type[Exception]) -> Path:
    """``path`` (a file of ``directory``, there or not) when it does not lead outside ``directory`` once
    symlinks are followed; else one line (``error``) naming it: a link planted in a shard or checkpoint
    directory is not followed to a file elsewhere."""
    real, home = os.path.realpath(path), os.path.realpath(directory)
    if os.path.commonpath([real, home]) != home:
        raise error(f"{path}: a symlink leading outside {directory} (to {real}); refused")
    return path


def _int(value: object) -> bool:
    return type(value) is int


def _check_fields(m: dict[str, Any], path: Path) -> None:
    """The manifest's values have the types and ranges the readers rely on; else one ShardError line
    naming the key (a stranger's manifest is data, not a promise)."""
    from llmpipe.errors import ShardError

    def bad(key: str, value: object, want: str) -> ShardError:
        return ShardError(
            f"{path}: {key} is {str(json.dumps(value))[:80]}, not {want} (damaged or hand-edited?)"
        )

    if not _int(m["seq_len"]) or not 1 <= m["seq_len"] <= MAX_SEQ_LEN:
        raise bad("seq_len", m["seq_len"], f"a whole number of tokens from 1 to {MAX_SEQ_LEN:,}")
    if m["dtype"] not in DTYPE_IDS:
        raise bad("dtype", m["dtype"], " or ".join(DTYPE_IDS))
    tok = m["tokenizer"]
    most = DTYPE_IDS[m["dtype"]]
    vocab = tok.get("vocab_size")
    if not _int(vocab) or not 1 <= vocab <= most:
        raise bad(
            "tokenizer.vocab_size", vocab, f"a whole number from 1 to {most:,} (ids held as {m['dtype']})"
        )
    eos = tok.get("eos_id")
    if not _int(eos) or not 0 <= eos < vocab:
        raise bad("tokenizer.eos_id", eos, f"a token id below the vocabulary size {vocab}")
    for name, value in (("sha256", tok.get("sha256")), ("file", tok.get("file", ""))):
        if value is not None and not isinstance(value, str):
            raise bad(f"tokenizer.{name}", value, "a string")
    if not isinstance(m["counts"], dict):
        raise bad("counts", m["counts"], "a mapping")
    for split, entry in m["splits"].items():
        if not isinstance(entry, dict):
            raise bad(f"splits.{split}", entry, "a mapping")
        for i, shard in enumerate(entry.get("shards") or []):
            if not isinstance(shard, dict):
                continue  # said by the caller: splits.X.shards must be a list of entries with a file name
            at = f"splits.{split}.shards[{i}]"
            for key in ("rows", "bytes", "sha256"):
                if key not in shard:
                    raise ShardError(f"{path}: {at} has no {key} (damaged or hand-edited?)")
            for key in ("rows", "bytes", "tokens"):
                if key in shard and (not _int(shard[key]) or shard[key] < 0):
                    raise bad(f"{at}.{key}", shard[key], "a whole number, 0 or more")
            for key in ("sha256", "fast_sha256"):
                if key in shard and not isinstance(shard[key], str):
                    raise bad(f"{at}.{key}", shard[key], "a hex string")
            if "block_bytes" in shard and (not _int(shard["block_bytes"]) or shard["block_bytes"] <= 0):
                raise bad(f"{at}.block_bytes", shard["block_bytes"], "a positive number of bytes")
            crcs = shard.get("block_crc32")
            if crcs is not None and (
                not isinstance(crcs, list) or not all(_int(c) and 0 <= c < 1 << 32 for c in crcs)
            ):
                raise bad(f"{at}.block_crc32", crcs, "a list of CRC-32 values (whole numbers below 2**32)")
            if (crcs is None) != (shard.get("block_bytes") is None):
                raise ShardError(f"{path}: {at} has one of block_bytes and block_crc32 without the other")


def plain_file_name(name: object, where: str) -> str:
    """``name`` when it is a plain file name, a file directly inside the shard directory; else a one-line
    ``ShardError``: no path separator, no ``.``/``..``, no NUL, not empty. Every name a manifest gives
    is checked with this before it is opened (``llmpipe inspect`` and the trainer alike)."""
    from llmpipe.errors import ShardError

    ok = (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and (os.altsep is None or os.altsep not in name)
    )
    if not ok:
        raise ShardError(f"{where}: {name!r} is not a plain file name inside the shard directory")
    return str(name)


def check_tokenizer(directory: Path, manifest: dict[str, Any]) -> Path | None:
    """The shards' tokenizer file, checked against the manifest's sha256 (ShardError if it differs or
    is gone); None when the manifest records no tokenizer file."""
    from llmpipe.errors import ShardError

    tok = manifest["tokenizer"]
    if tok.get("sha256") is None:
        return None
    path = Path(directory) / tok.get("file", TOKENIZER_FILE)
    if not path.is_file():
        raise ShardError(f"{path}: the tokenizer the shards were made with is missing")
    if sha256_file(path) != tok["sha256"]:
        raise ShardError(
            f"{path}: not the tokenizer the shards were made with (sha256 differs from the manifest's)"
        )
    return path


def tokenizer_ids(text: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """What decides the ids of a tokenizer.json's text: token -> id (added tokens included) and the
    ordered merges (``"a b"`` and ``["a", "b"]`` alike)."""
    doc = json.loads(text)
    model = doc.get("model", {}) if isinstance(doc, dict) else {}
    vocab = dict(model.get("vocab", {})) if isinstance(model.get("vocab"), dict) else {}
    vocab.update({t["content"]: t["id"] for t in doc.get("added_tokens", []) if isinstance(t, dict)})
    merges = [
        tuple(m.split(" ", 1)) if isinstance(m, str) else (str(m[0]), str(m[1]))
        for m in model.get("merges", []) or []
    ]
    return vocab, merges  # type: ignore[return-value]


def check_same_tokenizer(directory: Path, model_tokenizer: str | None, whose: str) -> None:
    """Refuse (one ShardError line) shards tokenised otherwise than the model ``whose`` tokenises: its
    tokenizer.json text (``model_tokenizer``) against the shards' own (checked against the manifest's
    sha256). Bits per byte or calibration on another tokenizer's ids mean nothing, even at the same
    vocabulary size. Without the model's tokenizer, at least the shards' ids must fit its vocabulary
    (the caller checks the sizes)."""
    from llmpipe.errors import ShardError

    manifest = read_manifest(directory)
    path = check_tokenizer(directory, manifest)
    if path is None:
        raise ShardError(
            f"{directory}: the manifest records no tokenizer, so nothing tells whether the shards were "
            f"tokenised as {whose} tokenises"
        )
    if model_tokenizer is None:
        return
    ours, theirs = tokenizer_ids(path.read_text(encoding="utf-8")), tokenizer_ids(model_tokenizer)
    if ours != theirs:
        diff = sorted(set(ours[0].items()) ^ set(theirs[0].items()))[:3]
        raise ShardError(
            f"{directory}: tokenised with another tokenizer than {whose}'s ({len(ours[0])} vs "
            f"{len(theirs[0])} tokens, {len(ours[1])} vs {len(theirs[1])} merges; first differences "
            f"{diff}): its ids would be read as other tokens; use shards made with the model's tokenizer"
        )


_MAGIC = b"ARROW1"
_BLOCK = 24  # flatbuffer struct Block { offset: long; metaDataLength: int; (pad); bodyLength: long }


def dual_ipc_bytes(table: pa.Table, schema: pa.Schema) -> bytes:
    """``table`` as Arrow IPC bytes that both the file reader and the stream reader accept.

    The IPC file format is ``ARROW1\\0\\0`` + the IPC stream + footer + footer length + ``ARROW1``. The
    file reader only needs the trailing magic and the footer (whose blocks give absolute offsets); the
    stream reader needs the stream at offset 0. So: drop the 8 leading bytes and shift every block
    offset in the footer by -8. Buffers stay 8-byte aligned (the stream is 8-aligned internally).
    """
    return b"".join(bytes(p) for p in dual_ipc_pieces(table, schema))


def dual_ipc_pieces(table: pa.Table, schema: pa.Schema) -> tuple[pa.Buffer, bytes, pa.Buffer]:
    """``dual_ipc_bytes`` as three pieces to write one after the other (the stream, a zero-copy view
    of the IPC file pyarrow wrote; the shifted footer; its length and the magic): a shard is written
    without holding its bytes twice more."""
    size = pa.MockOutputStream()  # counts the bytes: the buffer is allocated once, at its size (a
    with ipc.new_file(size, schema) as w:  # growing one would reallocate up to twice the shard)
        w.write_table(table)
    data = pa.allocate_buffer(size.size())
    with ipc.new_file(pa.FixedSizeBufferWriter(data), schema) as w:
        w.write_table(table)
    if data[:6].to_pybytes() != _MAGIC or data[-6:].to_pybytes() != _MAGIC:
        raise ValueError("pyarrow wrote an unexpected IPC file layout")
    (flen,) = struct.unpack_from("<i", data[-10:-6].to_pybytes())
    fstart = len(data) - 10 - flen
    footer = bytearray(data[fstart : len(data) - 10].to_pybytes())
    # Footer table: root uoffset -> table; vtable via soffset; fields 2 (dictionaries), 3 (recordBatches)
    (root,) = struct.unpack_from("<I", footer, 0)
    (vt_rel,) = struct.unpack_from("<i", footer, root)
    vt = root - vt_rel
    (vt_size,) = struct.unpack_from("<H", footer, vt)
    for field_index in (2, 3):
        slot = 4 + 2 * field_index
        if slot >= vt_size:
            continue
        (off,) = struct.unpack_from("<H", footer, vt + slot)
        if off == 0:
            continue
        vec_ref = root + off
        (rel,) = struct.unpack_from("<I", footer, vec_ref)
        vec = vec_ref + rel
        (n,) = struct.unpack_from("<I", footer, vec)
        for i in range(n):
            at = vec + 4 + i * _BLOCK
            (offset,) = struct.unpack_from("<q", footer, at)
            struct.pack_into("<q", footer, at, offset - 8)
    return data.slice(8, fstart - 8), bytes(footer), data.slice(len(data) - 10)
