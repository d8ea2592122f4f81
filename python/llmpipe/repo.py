"""The trainer (``train/`` at the repository root) seen from the ``llmpipe`` package.

``train`` is a directory of the source checkout, next to ``python/``, not part of the installed package;
commands that load runs (export, eval, ablate) import it from there."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from llmpipe.errors import LlmpipeError

ROOT = Path(__file__).resolve().parents[2]


def import_train(module: str) -> ModuleType:
    """``train.<module>``, adding the repository root to ``sys.path`` when needed."""
    try:
        return importlib.import_module(f"train.{module}")
    except ModuleNotFoundError as e:
        if e.name not in ("train", f"train.{module}"):
            raise
        if not (ROOT / "train" / "pretrain.py").is_file():
            raise LlmpipeError(
                f"this needs the trainer (train/{module}.py) of a source checkout of llmpipe"
            ) from e
    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(f"train.{module}")
    except ModuleNotFoundError as e:
        raise LlmpipeError(f"the trainer (train/{module}.py) is not importable: {e}") from e
