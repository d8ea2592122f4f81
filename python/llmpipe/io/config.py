"""How inputs are read: the ``read`` section of the curate config."""

from __future__ import annotations

from dataclasses import dataclass


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
