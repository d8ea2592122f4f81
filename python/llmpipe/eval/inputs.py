"""Evaluation texts from files: plain text (the whole file one document) or JSONL (one per line)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from llmpipe.errors import InputError


def read_texts(path: str | Path, *, field: str = "text", max_docs: int | None = None) -> list[str]:
    """``.jsonl`` / ``.jsonl.gz`` / ``.json`` lines: the ``field`` of each record; anything else is one
    UTF-8 document (``.gz`` decompressed). ``max_docs``: the first that many records (None or 0: all)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    name = path.name.lower().removesuffix(".gz")
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            if not name.endswith((".jsonl", ".json", ".ndjson")):
                return [f.read()]
            texts: list[str] = []
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{n}: not JSON ({e.msg})") from e
                except RecursionError:  # the parser stops cleanly at Python's recursion limit
                    raise InputError(f"{path}:{n}: JSON nested too deeply to read") from None
                if not isinstance(rec, dict) or not isinstance(rec.get(field), str):
                    raise InputError(f"{path}:{n}: no string field {field!r}")
                texts.append(rec[field])
                if max_docs and len(texts) >= max_docs:  # None or 0: all
                    break
            return texts
    except (UnicodeDecodeError, OSError, EOFError) as e:
        raise InputError(f"{path}: unreadable as UTF-8 text ({e})") from e
