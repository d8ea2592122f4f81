"""Parquet files, read a bounded slice of rows at a time.

A row group is not read whole: a small file can hold millions of rows that repeat one dictionary
entry (a 207 KB file decodes to gigabytes). Each row group is read in slices of as many rows as its
metadata says fit in ``slice_bytes`` (``_rows_per_slice``), and a text longer than ``max_doc_bytes``
is quarantined by its length before it becomes a Python string.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmpipe.io.chunks import Span
from llmpipe.io.fs import InputPath
from llmpipe.io.records import Bad, Doc

#: rows per slice at most (more gain nothing: the per-slice cost is spread already)
MAX_SLICE_ROWS = 1024


def read_parquet(
    path: InputPath,
    text_field: str = "text",
    id_field: str = "id",
    span: Span | None = None,
    max_doc_bytes: int = 20_000_000,
    slice_bytes: int = 64 << 20,
) -> Iterator[Doc | Bad]:
    """The rows of ``path`` (of its row groups ``span``); a document's position is its row's index."""
    with path.open("rb") as f:
        yield from _rows(f, text_field, id_field, span, max_doc_bytes, slice_bytes)


def _rows(
    f: BinaryIO, text_field: str, id_field: str, span: Span | None, max_doc_bytes: int, slice_bytes: int
) -> Iterator[Doc | Bad]:
    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowException, OSError) as e:
        yield Bad("unreadable_parquet", "file", str(e))
        return
    names = pf.schema_arrow.names
    if text_field not in names:
        yield Bad("missing_text_field", "schema", f"columns are {names}")
        return
    row = span.first if span is not None else 0
    for g in range(span.start, span.end) if span is not None else range(pf.num_row_groups):
        rows = pf.metadata.row_group(g).num_rows
        end = row + rows
        try:
            step = _rows_per_slice(f, pf.metadata.row_group(g), slice_bytes)
            for batch in pf.iter_batches(batch_size=step, row_groups=[g], use_threads=False):
                yield from _slice(batch, row, text_field, id_field, max_doc_bytes)
                row += batch.num_rows
        except (pa.ArrowException, OSError) as e:
            first = row + 1
            yield Bad(
                "unreadable_row_group", f"row group {g} (rows {first}-{end})", str(e), records=end - row
            )
        row = end


def _slice(
    batch: pa.RecordBatch, row: int, text_field: str, id_field: str, max_doc_bytes: int
) -> Iterator[Doc | Bad]:
    """The documents of one slice whose first row is ``row`` (0-based); texts longer than
    ``max_doc_bytes`` are quarantined by their length, never turned into Python strings."""
    texts = batch.column(text_field)
    big: dict[int, tuple[int, str]] = {}
    if pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type):
        lengths = pc.binary_length(texts)
        over = pc.fill_null(pc.greater(lengths, max_doc_bytes), False)
        if pc.any(over).as_py():
            where = pc.indices_nonzero(over)
            heads = pc.utf8_slice_codeunits(texts.take(where), 0, 200).to_pylist()
            sizes = lengths.take(where).to_pylist()
            big = dict(zip(where.to_pylist(), zip(sizes, heads, strict=True), strict=True))
            batch = batch.filter(pc.invert(over))
    kept = iter(batch.to_pylist())
    for i in range(len(texts)):
        at = row + i + 1
        if i in big:
            size, head = big[i]
            yield Bad(
                "document_too_large", f"row {at}", f"{size} bytes > max_doc_bytes {max_doc_bytes}", head
            )
            continue
        rec = next(kept)
        text = rec.pop(text_field)
        if not isinstance(text, str):
            yield Bad("text_not_a_string", f"row {at}", type(text).__name__)
            continue
        doc_id = rec.pop(id_field, None)
        yield Doc(None if doc_id is None else str(doc_id), text, rec, location=f"row {at}", position=at - 1)


def _rows_per_slice(f: BinaryIO, group: pq.RowGroupMetaData, slice_bytes: int) -> int:
    """Rows of ``group`` whose decoded values surely fit in ``slice_bytes``.

    A row's bytes in a column are bounded by its share of the column's uncompressed pages plus, for
    a dictionary-encoded column, the whole dictionary (every row may repeat its longest entry); with
    DELTA_BYTE_ARRAY (values share prefixes) by the whole column.
    """
    rows = max(group.num_rows, 1)
    per_row = 0
    for c in range(group.num_columns):
        col = group.column(c)
        size = max(col.total_uncompressed_size, 0)
        if "DELTA_BYTE_ARRAY" in col.encodings:
            per_row += size
            continue
        per_row += size // rows + 1
        if col.has_dictionary_page:
            per_row += _dictionary_size(f, col.dictionary_page_offset, size)
    return max(1, min(MAX_SLICE_ROWS, slice_bytes // per_row))


def _dictionary_size(f: BinaryIO, offset: int | None, fallback: int) -> int:
    """The uncompressed size of the dictionary page at ``offset`` (from its Thrift header), or
    ``fallback`` when it cannot be read."""
    if offset is None or offset < 4:
        return fallback
    try:
        at = f.tell()
        f.seek(offset)
        head = f.read(32)
        f.seek(at)
    except OSError:
        return fallback
    # PageHeader, Thrift compact protocol: field 1 (type, i32), field 2 (uncompressed_page_size, i32)
    pos, field = 0, 0
    while pos < len(head):
        byte = head[pos]
        pos += 1
        if byte & 0x0F != 5 or byte >> 4 == 0:  # only i32 fields with a short id delta come first
            return fallback
        field += byte >> 4
        value, shift = 0, 0
        while pos < len(head):
            b = head[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        value = (value >> 1) ^ -(value & 1)
        if field == 2:
            return value if value >= 0 else fallback
    return fallback
