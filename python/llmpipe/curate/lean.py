"""Start-up of the processes of a curate run: what each need not pay for.

pyarrow imports pandas (about 0.3 CPU-s, as much as numpy and pyarrow together) the first time a call
asks whether its argument is a pandas object, and nearly every call asks: ``pa.array`` of a list or
of a numpy array, ``to_numpy`` of some arrays. A curate run never hands pyarrow a pandas object, so
its processes (the driver of ``llmpipe curate`` and every pool worker) answer that question once, before
anything else asks: ``pyarrow_without_pandas``. pyarrow keeps the answer for those checks only; a
``Table.to_pandas()`` or ``from_pandas`` later in the process still imports pandas and works as usual.
"""

from __future__ import annotations

import importlib.abc
import sys


class _NoPandas(importlib.abc.MetaPathFinder):
    """While installed, ``import pandas`` fails as if it were not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def pyarrow_without_pandas() -> None:
    """Make pyarrow's lazy pandas check find no pandas, once, without importing it; pandas stays
    importable. Nothing changes when pandas is imported already or pyarrow has looked for it."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    block = _NoPandas()
    sys.meta_path.insert(0, block)
    try:
        pa.array([0])  # pyarrow's first pandas check: it finds none and remembers
    finally:
        sys.meta_path.remove(block)
