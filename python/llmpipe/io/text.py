"""Plain text files: one document per file."""

from __future__ import annotations

from collections.abc import Iterator

from llmpipe.io.compression import open_binary
from llmpipe.io.fs import InputPath
from llmpipe.io.records import Bad, Doc


def read_text(path: InputPath, max_bytes: int) -> Iterator[Doc | Bad]:
    try:
        with open_binary(path) as f:
            data = f.read(max_bytes + 1)
    except (OSError, EOFError) as e:
        yield Bad("truncated_or_corrupt_stream", "file", f"{type(e).__name__}: {e}")
        return
    if len(data) > max_bytes:
        yield Bad("document_too_large", "file", f"more than {max_bytes} bytes")
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        yield Bad("undecodable_bytes", f"byte {e.start}", str(e))
        return
    yield Doc(None, text)
