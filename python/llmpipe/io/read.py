"""Detect an input's format (by content, then by name) and stream it as Arrow batches of documents."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from llmpipe.curate.stage import DOC_SCHEMA
from llmpipe.io.compression import peek
from llmpipe.io.jsonl import read_jsonl
from llmpipe.io.parquet import read_parquet
from llmpipe.io.records import Bad, Doc
from llmpipe.io.text import read_text


@dataclass
class ReadConfig:
    """How inputs are read (YAML section ``read``)."""

    text_field: str = "text"
    id_field: str = "id"
    batch_size: int = 1000
    #: documents longer than this (UTF-8 bytes) are quarantined as ``document_too_large``
    max_doc_bytes: int = 20_000_000


def detect_format(path: Path) -> str:
    """One of jsonl, parquet, warc, arc, text, empty, binary."""
    if path.stat().st_size == 0:
        return "empty"
    with open(path, "rb") as f:
        if f.read(4) == b"PAR1":
            return "parquet"
    head = peek(path)
    if not head:
        return "empty" if path.stat().st_size == 0 else "binary"
    stripped = head.lstrip()
    if stripped.startswith(b"WARC/"):
        return "warc"
    if stripped.startswith(b"filedesc://"):
        return "arc"
    if stripped.startswith(b"{"):
        return "jsonl"
    if b"\x00" in head:
        return "binary"
    name = path.name.lower()
    for ext in (".gz", ".zst", ".bz2"):
        name = name.removesuffix(ext)
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "text"


def _records(path: Path, cfg: ReadConfig) -> Iterator[Doc | Bad]:
    fmt = detect_format(path)
    if fmt == "jsonl":
        yield from read_jsonl(path, cfg.text_field, cfg.id_field)
    elif fmt == "parquet":
        yield from read_parquet(path, cfg.text_field, cfg.id_field)
    elif fmt == "text":
        yield from read_text(path, cfg.max_doc_bytes)
    elif fmt in WEB_READERS:
        yield from WEB_READERS[fmt](path)
    elif fmt == "empty":
        yield Bad("empty_file", "file", "the file has no bytes")
    else:
        yield Bad(f"unsupported_format_{fmt}", "file", f"detected format {fmt!r}")


#: readers for crawl formats, registered by llmpipe.io.warc (kept out of this module's imports)
WEB_READERS: dict[str, Callable[[Path], Iterator[Doc | Bad]]] = {}


def read_batches(
    path: Path, source: str, cfg: ReadConfig, on_bad: Callable[[Bad], None]
) -> Iterator[pa.RecordBatch]:
    """Stream one input as batches of ``DOC_SCHEMA`` (+ ``meta`` JSON); bad records go to ``on_bad``."""
    import json

    ids: list[str] = []
    texts: list[str] = []
    positions: list[int] = []
    metas: list[str] = []
    pos = 0
    seen: set[str] = set()

    def flush() -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(ids, pa.string()),
                pa.array(texts, pa.string()),
                pa.array([source] * len(ids), pa.string()),
                pa.array(positions, pa.int64()),
                pa.array(metas, pa.string()),
            ],
            schema=DOC_SCHEMA.append(pa.field("meta", pa.string())),
        )
        ids.clear()
        texts.clear()
        positions.clear()
        metas.clear()
        return batch

    for rec in _records(path, cfg):
        if isinstance(rec, Bad):
            on_bad(rec)
            continue
        try:
            size = len(rec.text.encode("utf-8"))
        except UnicodeEncodeError as e:  # lone surrogates from JSON escapes
            snippet = rec.text[:200].encode("utf-8", "replace").decode()
            on_bad(Bad("undecodable_bytes", f"record {pos}", str(e), snippet))
            pos += 1
            continue
        if size > cfg.max_doc_bytes:
            on_bad(
                Bad(
                    "document_too_large", f"record {pos}", f"{size} bytes > max_doc_bytes {cfg.max_doc_bytes}"
                )
            )
            pos += 1
            continue
        # ids are unique in a run by construction: "<input>/<id from the record, or its position>"
        doc_id = f"{source}/{rec.id if rec.id is not None else pos}"
        if doc_id in seen:
            doc_id = f"{doc_id}#{pos}"
        seen.add(doc_id)
        ids.append(doc_id)
        texts.append(rec.text)
        positions.append(pos)
        metas.append(
            json.dumps(rec.meta, ensure_ascii=False, sort_keys=True, default=str) if rec.meta else ""
        )
        pos += 1
        if len(ids) >= cfg.batch_size:
            yield flush()
    if ids:
        yield flush()
