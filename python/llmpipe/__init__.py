"""llmpipe: raw web crawl to trained language model."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use: ``importlib.metadata`` costs each process ~0.05
    CPU-s, and a curate worker never asks."""
    if name != "__version__":
        raise AttributeError(f"module 'llmpipe' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("llmpipe")
    except PackageNotFoundError:  # running from a source tree without install
        found = "0.0.0+src"
    globals()["__version__"] = found
    return found
