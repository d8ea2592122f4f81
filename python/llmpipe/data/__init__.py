"""Token shards: the writer used by curation and the loader used by training.

Imports are lazy: ``llmpipe.data.format`` (used by every CLI command) must not pull in torch, which
only the loader needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmpipe.data.dataset import ShardDataset
    from llmpipe.data.loader import Batch, TokenLoader
    from llmpipe.data.writer import ShardWriter

__all__ = ["Batch", "ShardDataset", "ShardWriter", "TokenLoader"]

_WHERE = {
    "Batch": "llmpipe.data.loader",
    "TokenLoader": "llmpipe.data.loader",
    "ShardDataset": "llmpipe.data.dataset",
    "ShardWriter": "llmpipe.data.writer",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'llmpipe.data' has no attribute {name!r}")
