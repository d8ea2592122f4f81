"""llmpipe: raw web crawl to trained language model."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``: the version compiled into the Rust core, equal to the package's
    (tests/test_packaging.py checks). ``importlib.metadata`` scanned every installed distribution
    for it, ~0.05 CPU-s per process (each CLI command, each curate driver)."""
    if name != "__version__":
        raise AttributeError(f"module 'llmpipe' has no attribute {name!r}")
    from llmpipe import _core

    found = globals()["__version__"] = str(_core.__version__)
    return found
