"""JSON Lines (plain, .gz, .zst, .bz2): one document per line with a text field and an optional id."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import zstandard

from llmpipe.io.compression import open_binary
from llmpipe.io.records import Bad, Doc


def read_jsonl(path: Path, text_field: str = "text", id_field: str = "id") -> Iterator[Doc | Bad]:
    lineno = 0
    try:
        with open_binary(path) as f:
            for raw in f:
                lineno += 1
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield Bad("undecodable_bytes", f"line {lineno}", str(e), raw[:200].decode("latin-1"))
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    yield Bad("invalid_json", f"line {lineno}", str(e), line[:200])
                    continue
                if not isinstance(obj, dict):
                    yield Bad("not_an_object", f"line {lineno}", type(obj).__name__, line[:200])
                    continue
                text = obj.get(text_field)
                if text is None:
                    yield Bad("missing_text_field", f"line {lineno}", f"no {text_field!r} key", line[:200])
                    continue
                if not isinstance(text, str):
                    yield Bad("text_not_a_string", f"line {lineno}", type(text).__name__, line[:200])
                    continue
                doc_id = obj.get(id_field)
                meta = {k: v for k, v in obj.items() if k not in (text_field, id_field)}
                yield Doc(None if doc_id is None else str(doc_id), text, meta)
    except (EOFError, zlib.error, OSError, zstandard.ZstdError) as e:
        # a truncated or corrupt compressed stream: what was read so far is kept
        yield Bad("truncated_or_corrupt_stream", f"after line {lineno}", f"{type(e).__name__}: {e}")
