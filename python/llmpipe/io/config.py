"""How inputs are read: the ``read`` section of the curate config."""

from __future__ import annotations

from dataclasses import dataclass

#: bytes one Arrow string array can hold (32-bit offsets)
ARROW_STRING_LIMIT = 2**31 - 1


@dataclass
class ReadConfig:
    """How inputs are read (YAML section ``read``)."""

    text_field: str = "text"
    id_field: str = "id"
    batch_size: int = 1000
    #: documents longer than this (UTF-8 bytes) are quarantined as ``document_too_large``
    max_doc_bytes: int = 20_000_000
    #: a batch is handed on at ``batch_size`` documents or once its texts hold this many UTF-8 bytes
    #: (one Arrow string column holds at most 2 GiB); Parquet row groups are decoded in slices of
    #: at most a quarter of it (a slice is held as Arrow and as Python strings at once)
    max_batch_bytes: int = 64 << 20
    #: HTML pages: keep only the main content (resiliparse's main-content pass, then the block-level
    #: boilerplate filter of ``llmpipe.io.extract.Boilerplate``), else all visible text
    html_main_content: bool = True
    #: web pages whose elements nest deeper than this are dropped as ``html_too_deep`` before
    #: extraction (its time grows with the square of the depth: 20,000 levels take half a minute)
    max_html_depth: int = 2000

    def __post_init__(self) -> None:
        if self.max_doc_bytes <= 0:
            raise ValueError("read.max_doc_bytes must be positive")
        if self.batch_size <= 0:
            raise ValueError("read.batch_size must be positive")
        if self.max_batch_bytes <= 0:
            raise ValueError("read.max_batch_bytes must be positive")
        if self.max_doc_bytes + self.max_batch_bytes >= ARROW_STRING_LIMIT:
            raise ValueError(
                f"read.max_doc_bytes + read.max_batch_bytes must stay below {ARROW_STRING_LIMIT} "
                "(a batch holds up to their sum, in one Arrow string column)"
            )
        if self.max_html_depth <= 0:
            raise ValueError("read.max_html_depth must be positive")
