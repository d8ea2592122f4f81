"""Executors decide where a step runs, never what it does.

An executor runs ``fn(*a)`` for every ``a`` of ``args`` and returns the results in argument order.
``LocalExecutor`` runs them in this process; ``llmpipe.distributed.executor.RayExecutor`` as tasks on a
Ray cluster. The steps themselves (``llmpipe.curate.steps``) are plain module-level functions that
write their outputs by atomic rename, so any executor may run, retry or resume them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from llmpipe.curate.workdir import fault_point


class Executor(Protocol):
    """Runs ``fn(*a)`` for every ``a`` of ``args`` (here or on a cluster); results in argument order."""

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str) -> list[Any]: ...


class LocalExecutor:
    """Runs the steps one after another in this process (the Rust stages use every core)."""

    workers = 1  # one task at a time: a global stage's partition phases share one process

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str) -> list[Any]:
        from tqdm import tqdm

        out = []
        for j, a in enumerate(tqdm(args, desc=desc, unit="file", disable=not self.progress, leave=False)):
            out.append(fn(*a))
            fault_point(f"{desc}#{j}")
        return out


def map_with(
    executor: Executor | None, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str
) -> list[Any]:
    """``executor.map``, or a plain loop in this process without an executor."""
    return [fn(*a) for a in args] if executor is None else executor.map(fn, args, desc)


def executor_workers(executor: Executor | None) -> int:
    """How many tasks the executor runs at once (``workers`` attribute; 1 in this process)."""
    return max(1, int(getattr(executor, "workers", 1))) if executor is not None else 1
