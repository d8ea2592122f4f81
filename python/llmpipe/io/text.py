"""Plain text files: one document per file."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import zstandard

from llmpipe.io.compression import open_binary, stream_problem
from llmpipe.io.fs import InputPath
from llmpipe.io.records import Bad, Doc


def read_text(path: InputPath, max_bytes: int) -> Iterator[Doc | Bad]:
    try:
        with open_binary(path) as f:
            data = f.read(max_bytes + 1)
            if len(data) <= max_bytes:
                f.read(1)  # a short read is the end of the file, or a cut that this read raises
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
        # the file is its one document: cut short or corrupt, it is quarantined whole
        yield Bad("truncated_or_corrupt_stream", "file", stream_problem(e))
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
