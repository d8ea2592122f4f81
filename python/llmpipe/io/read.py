"""Detect an input's format (by content, then by name) and stream it as Arrow batches of documents."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from llmpipe.curate.stage import DOC_SCHEMA, StageCounts, apply_reasons, word_counts
from llmpipe.io.compression import peek
from llmpipe.io.jsonl import read_jsonl
from llmpipe.io.parquet import read_parquet
from llmpipe.io.records import Bad, Doc, Skip
from llmpipe.io.text import read_text


@dataclass
class ReadConfig:
    """How inputs are read (YAML section ``read``)."""

    text_field: str = "text"
    id_field: str = "id"
    batch_size: int = 1000
    #: documents longer than this (UTF-8 bytes) are quarantined as ``document_too_large``
    max_doc_bytes: int = 20_000_000
    #: HTML pages: keep only the main content (resiliparse's heuristics), else all visible text
    html_main_content: bool = True

    def __post_init__(self) -> None:
        if self.max_doc_bytes <= 0:
            raise ValueError("read.max_doc_bytes must be positive")
        if self.batch_size <= 0:
            raise ValueError("read.batch_size must be positive")


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


def _records(path: Path, cfg: ReadConfig) -> Iterator[Doc | Bad | Skip]:
    fmt = detect_format(path)
    if fmt in ("warc", "arc") and fmt not in WEB_READERS:
        import llmpipe.io.warc  # noqa: F401 - registers the crawl readers (FastWARC loads only when needed)

    if fmt == "jsonl":
        yield from read_jsonl(path, cfg.text_field, cfg.id_field, cfg.max_doc_bytes)
    elif fmt == "parquet":
        yield from read_parquet(path, cfg.text_field, cfg.id_field)
    elif fmt == "text":
        yield from read_text(path, cfg.max_doc_bytes)
    elif fmt in WEB_READERS:
        yield from WEB_READERS[fmt](path, cfg)
    elif fmt == "empty":
        yield Bad("empty_file", "file", "the file has no bytes")
    else:
        yield Bad(f"unsupported_format_{fmt}", "file", f"detected format {fmt!r}")


#: readers for crawl formats, registered by llmpipe.io.warc (kept out of this module's imports)
WEB_READERS: dict[str, Callable[[Path, ReadConfig], Iterator[Doc | Bad | Skip]]] = {}


def read_batches(
    path: Path,
    source: str,
    cfg: ReadConfig,
    on_bad: Callable[[Bad], None],
    read: StageCounts | None = None,
    extract: StageCounts | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream one input as batches of ``DOC_SCHEMA`` (+ ``meta`` JSON); bad records go to ``on_bad``.

    Counting (when ``read`` and ``extract`` are given): ``read`` sees every record of the input: the
    documents it hands on, ``skipped_<reason>`` for records that hold none (WARC requests, non-HTML
    responses ...); the caller counts the quarantined ones from ``on_bad`` (``Bad.records`` each). Its words are those of the
    raw content (HTML words for web pages). ``extract`` takes the documents from raw to text: words in
    are raw words, words out the extracted text's, and pages with no main text are dropped as
    ``empty_after_extract``. Non-HTML inputs pass through ``extract`` unchanged.
    """
    import json

    read = read if read is not None else StageCounts("read")
    extract = extract if extract is not None else StageCounts("extract")
    ids: list[str] = []
    texts: list[str] = []
    positions: list[int] = []
    metas: list[str] = []
    raws: list[int] = []
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
        words = word_counts(batch)
        raw = np.asarray(raws, dtype=np.int64)
        extracted = raw >= 0
        raw = np.where(extracted, raw, words)
        read.docs_in += batch.num_rows
        read.docs_out += batch.num_rows
        read.tokens_in += int(raw.sum())
        read.tokens_out += int(raw.sum())
        empty = extracted & (words == 0)  # whitespace only (str.split and Arrow's trim agree on it)
        reasons = ["empty_after_extract" if e else None for e in empty.tolist()]
        kept = apply_reasons(batch, reasons, extract, words)
        extract.tokens_in += int(raw.sum() - words.sum())  # words in = raw words
        extract.modified += int(extracted.sum())
        for lst in (ids, texts, positions, metas, raws):
            lst.clear()
        return kept

    for rec in _records(path, cfg):
        if isinstance(rec, Skip):
            read.docs_in += 1
            read.dropped[f"skipped_{rec.reason}"] += 1
            continue
        if isinstance(rec, Bad):
            on_bad(rec)
            continue
        try:
            size = len(rec.text.encode("utf-8"))
        except UnicodeEncodeError as e:  # lone surrogates from JSON escapes
            snippet = rec.text[:200].encode("utf-8", "replace").decode()
            on_bad(Bad("undecodable_bytes", rec.location or f"record {pos}", str(e), snippet))
            pos += 1
            continue
        if size > cfg.max_doc_bytes:
            on_bad(
                Bad(
                    "document_too_large",
                    rec.location or f"record {pos}",
                    f"{size} bytes > max_doc_bytes {cfg.max_doc_bytes}",
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
        raws.append(-1 if rec.raw_words is None else rec.raw_words)
        pos += 1
        if len(ids) >= cfg.batch_size:
            batch = flush()
            if batch.num_rows:
                yield batch
    if ids:
        batch = flush()
        if batch.num_rows:
            yield batch
