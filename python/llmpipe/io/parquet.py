"""Parquet files, read one row group at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from llmpipe.io.chunks import Span
from llmpipe.io.fs import InputPath
from llmpipe.io.records import Bad, Doc


def read_parquet(
    path: InputPath, text_field: str = "text", id_field: str = "id", span: Span | None = None
) -> Iterator[Doc | Bad]:
    """The rows of ``path`` (of its row groups ``span``); a document's position is its row's index."""
    with path.open("rb") as f:
        yield from _rows(f, text_field, id_field, span)


def _rows(f: BinaryIO, text_field: str, id_field: str, span: Span | None) -> Iterator[Doc | Bad]:
    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowInvalid, OSError) as e:
        yield Bad("unreadable_parquet", "file", str(e))
        return
    names = pf.schema_arrow.names
    if text_field not in names:
        yield Bad("missing_text_field", "schema", f"columns are {names}")
        return
    row = span.first if span is not None else 0
    for g in range(span.start, span.end) if span is not None else range(pf.num_row_groups):
        try:
            table = pf.read_row_group(g)
        except (pa.ArrowInvalid, OSError) as e:
            rows = pf.metadata.row_group(g).num_rows
            first = row + 1
            row += rows
            yield Bad("unreadable_row_group", f"row group {g} (rows {first}-{row})", str(e), records=rows)
            continue
        for rec in table.to_pylist():
            row += 1
            text = rec.pop(text_field)
            if not isinstance(text, str):
                yield Bad("text_not_a_string", f"row {row}", type(text).__name__)
                continue
            doc_id = rec.pop(id_field, None)
            yield Doc(
                None if doc_id is None else str(doc_id), text, rec, location=f"row {row}", position=row - 1
            )
