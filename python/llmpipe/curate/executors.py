"""Executors decide where a step runs, never what it does.

An executor runs ``fn(*a)`` for every ``a`` of ``args`` and returns the results in argument order.
``LocalExecutor`` runs them in this process, ``PoolExecutor`` in worker processes on every core of this
machine, ``llmpipe.distributed.executor.RayExecutor`` as tasks on a Ray cluster. The steps themselves (``llmpipe.curate.steps``) are plain module-level functions that
write their outputs by atomic rename, so any executor may run, retry or resume them.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from llmpipe import _core
from llmpipe.curate.workdir import WORKER_ENV, fault_point, pyarrow_without_pandas
from llmpipe.memory import release_memory, tune_allocators

#: called with (index of the task, its result) as each task finishes, in completion order
Done = Callable[[int, Any], None]


class InOrder:
    """A ``Done`` that calls ``then(j)`` for j = 0, 1, 2, ... as soon as tasks 0..j have all finished,
    whatever order they finish in (so the driver can consume results in argument order while later
    tasks still run); ``finish(n)`` catches up to ``n`` tasks after the map returns."""

    def __init__(self, then: Callable[[int], None]) -> None:
        self.then = then
        self.finished: set[int] = set()
        self.next = 0

    def __call__(self, j: int, _result: Any) -> None:
        self.finished.add(j)
        self._advance()

    def finish(self, n: int) -> None:
        self.finished.update(range(n))
        self._advance()

    def _advance(self) -> None:
        while self.next in self.finished:
            self.finished.discard(self.next)
            self.next += 1  # first: a failing ``then`` is not retried by a later call
            self.then(self.next - 1)


class Executor(Protocol):
    """Runs ``fn(*a)`` for every ``a`` of ``args`` (here or on a cluster); results in argument order."""

    def map(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str, done: Done | None = None
    ) -> list[Any]: ...


class LocalExecutor:
    """Runs the steps one after another in this process (the Rust stages use every core)."""

    workers = 1  # one task at a time: a global stage's partition phases share one process

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress

    def map(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str, done: Done | None = None
    ) -> list[Any]:
        from tqdm import tqdm

        out = []
        for j, a in enumerate(tqdm(args, desc=desc, unit="file", disable=not self.progress, leave=False)):
            out.append(_run_task(fn, *a))
            if done is not None:
                done(j, out[-1])
            fault_point(f"{desc}#{j}")
        release_memory()  # what the tasks freed: the driver's next phase does not start on top
        return out


class PoolExecutor:
    """Runs the steps in ``workers`` processes of this machine, results in argument order.

    Workers are started on first use and kept for the run; each makes its Rust thread pool with
    ``cores // workers`` threads so workers x threads fit the cores. A map of one task runs in this
    process, with every core.

    With ``fork`` (Linux), the workers are forked from this process, so they share what it has
    imported instead of each importing it again (~0.4 CPU-s per worker: pyarrow, numpy, the steps).
    That is only safe while this process has not made its own Rust thread pool (a forked child gets
    the pool's state but none of its threads): each child claims a fresh pool first, and where it
    cannot, the pool is started again with spawned interpreters. Without ``fork`` (or elsewhere),
    workers are spawned fresh interpreters.
    """

    def __init__(self, workers: int, progress: bool = True, fork: bool = False) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        self.progress = progress
        #: how the workers start: "fork" or "spawn" (after a fork that came too late, "spawn")
        self.start_method = "fork" if fork and sys.platform == "linux" else "spawn"
        self._pool: ProcessPoolExecutor | None = None
        self._warming: list[Future[Any]] = []

    def start(self, warm: Callable[[], object] | None = None) -> None:
        """Start the workers now, while this process plans the run. Each runs ``warm``, a
        module-level function of the steps to come: the worker imports its module meanwhile (a
        spawned interpreter takes about half a second to import the curate steps)."""
        if self.workers > 1:
            pool = self._started()
            self._warming = [pool.submit(warm or _nothing) for _ in range(self.workers)]

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = self._new_pool()
            if self.start_method == "fork":
                try:  # a fork starts every worker at once: one task proves them all
                    self._pool.submit(_nothing).result()
                except BrokenProcessPool:  # the children found this process's Rust pool made
                    self._pool.shutdown()
                    gc.unfreeze()  # no child shares this process's pages any more
                    self.start_method = "spawn"
                    self._pool = self._new_pool()
        return self._pool

    def _new_pool(self) -> ProcessPoolExecutor:
        threads = max(1, (os.cpu_count() or 1) // self.workers)
        if self.start_method == "fork":
            sys.stdout.flush()
            sys.stderr.flush()
            gc.freeze()  # the children's collections leave the shared objects (and their pages) alone
        return ProcessPoolExecutor(
            self.workers,
            mp_context=multiprocessing.get_context(self.start_method),
            initializer=_start_worker,
            initargs=(threads, os.getpid()),
        )

    def map(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str, done: Done | None = None
    ) -> list[Any]:
        if len(args) <= 1 or self.workers == 1:
            return LocalExecutor(self.progress).map(fn, args, desc, done)
        pool = self._started()
        for w in self._warming:  # a worker that failed to start says so here
            w.result()
        self._warming = []
        futures: list[Future[Any]] = [pool.submit(_run_task, fn, *a) for a in args]
        out = []
        try:
            if done is not None:
                index = {f: j for j, f in enumerate(futures)}
                for f in as_completed(futures):
                    if f.exception() is not None:
                        _first_failure(futures, index[f])
                    done(index[f], f.result())
            for j, f in enumerate(futures):
                out.append(f.result())
                fault_point(f"{desc}#{j}")
        except BaseException:
            for f in futures:
                f.cancel()
            raise
        return out

    def close(self, abort: bool = False) -> None:
        """Stop the workers once their running tasks end; ``abort``: now, killing them mid-task (on
        Ctrl-C or an error: a task can run for many seconds, and a re-run redoes an unfinished one)."""
        if self._pool is not None:
            if abort:
                for proc in list(self._pool._processes.values()):
                    proc.kill()
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
            # what the fork froze is collectable again: frozen, the reference cycles of a native module
            # outlive its teardown at exit, and nanobind (triton's bindings, imported by transformers
            # through torch._dynamo) then prints ~30 lines of "leaked types" to the terminal
            gc.unfreeze()


def _first_failure(futures: Sequence[Future[Any]], failed: int) -> None:
    """Raise the failure of the first task in argument order up to ``failed`` (a task that failed):
    the same error whatever order the workers finished them in. The tasks after it are cancelled."""
    for f in futures[failed + 1 :]:
        f.cancel()
    for f in futures[: failed + 1]:
        f.result()


def _start_worker(threads: int, driver: int) -> None:
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # the share of the cores, also for torch's threads
    os.environ[WORKER_ENV] = "1"
    _die_with_parent(driver)
    if not _core.claim_thread_pool(threads):  # forked from a process whose pool has threads elsewhere:
        os._exit(UNUSABLE_FORK)  # its first parallel call would wait forever (the pool restarts spawned)
    pyarrow_without_pandas()
    tune_allocators()


#: the exit status of a forked worker that inherited a made Rust thread pool
UNUSABLE_FORK = 3


def _nothing() -> None:
    pass


#: the step (function) of the last task this process ran, for ``_run_task``
_last_step: Callable[..., Any] | None = None


def _run_task(fn: Callable[..., Any], *a: Any) -> Any:
    """``fn(*a)``. When the task before it in this process ran another step, the memory that one
    freed goes back to the system first, so that a new kind of task does not start on top of the
    last one's freed heap. Tasks of one step (segment 0 of each part) reuse what the one before
    freed instead: handing it back after every task made each fault its ~40 MB of freed heap in
    again (0.4 GB, 16 files, 2 workers: 561,000 minor faults and 2.24 s of system time, against
    384,000 and 1.87 s; the largest process within 10 MB, +18 MB at 1.2 GB in one file)."""
    global _last_step
    if fn is not _last_step:
        release_memory()
        _last_step = fn
    return fn(*a)


def _die_with_parent(parent: int) -> None:
    """A worker must not outlive a killed driver (``parent``): it would wait for work forever,
    holding the run's output pipes open. Linux kills it with its parent (PR_SET_PDEATHSIG); elsewhere
    a thread checks. A driver that died while the worker was starting is caught by comparing with
    the pid the driver gave, not with the parent the worker finds (by then, init)."""
    if os.getppid() != parent:
        os._exit(1)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0:  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before the call
                os._exit(1)
            return
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="llmpipe-parent-watch").start()


def map_with(
    executor: Executor | None, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str
) -> list[Any]:
    """``executor.map``, or a plain loop in this process without an executor."""
    return [fn(*a) for a in args] if executor is None else executor.map(fn, args, desc)


def executor_workers(executor: Executor | None) -> int:
    """How many tasks the executor runs at once (``workers`` attribute; 1 in this process)."""
    return max(1, int(getattr(executor, "workers", 1))) if executor is not None else 1
