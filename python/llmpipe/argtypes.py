"""argparse types for numbers with a lower bound: a value out of range is argparse's one error line
(``--chars: must be >= 1, got 0``), never a default in disguise or a traceback later."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
        return v

    return parse


def number_at_least(low: float) -> Callable[[str], float]:
    """A finite number >= ``low``."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(v) or v < low:
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low:g}, got {text}")
        return v

    return parse
