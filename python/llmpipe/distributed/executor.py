"""``RayExecutor``: the per-input curate steps as Ray tasks, one CPU each, results in input order.

The steps (``map_segment``, ``tokenize_input``) are plain picklable functions of a ``Job`` that write
their outputs and a completion marker by atomic rename under ``--out``; a retried task (lost node,
killed worker) finds the marker or rewrites the same bytes, so retries neither lose nor duplicate
anything. ``--out`` must be on storage every node sees (one machine, NFS, an object-store mount).
The global dedup stages hand their partition phases (shuffle, per-partition groups and verified
edges, hash group-by) to ``map`` as well; only their union-find and the final drop list, tokenizer
training and packing run on the driver, as in a local run. Tasks are named after ``desc``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from llmpipe.curate.executors import Done
from llmpipe.errors import InputError, LlmpipeError

DEFAULT_MAX_RETRIES = 4


def _probe(address: str, timeout: float = 10.0) -> None:
    """A ``host:port`` with nothing listening fails here in seconds (ray.init would retry for minutes);
    an address that is none of Ray's forms fails here in one line."""
    if not address.strip():
        raise InputError("--ray needs an address: auto, HOST:PORT or ray://HOST:PORT")
    if address.startswith(("http://", "https://")):
        raise InputError(
            f"--ray {address}: that is a dashboard (Jobs API) address; --ray takes the cluster's address "
            "(HOST:6379, ray://HOST:10001, or auto inside `ray job submit --address " + address + " -- ...`)"
        )
    if address in ("auto", "local") or address.startswith("ray://"):
        return  # left to ray.init
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(f"--ray {address}: not a Ray address; use auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise InputError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e})") from None


def auth_hint(address: str | None) -> str:
    """Why a cluster that answers may still refuse this driver: ``ray start`` turns on token
    authentication by default (Ray 2.59 on), and a driver given an address (not ``auto``) sends no
    token unless ``RAY_AUTH_MODE=token`` is set. llmpipe never sends one on its own: the token would
    go to whatever host the address names."""
    if address in (None, "auto") or os.environ.get("RAY_AUTH_MODE"):
        return ""
    return (
        "; if the cluster uses token authentication (`ray start`'s default since Ray 2.59), set "
        "RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN, or ~/.ray/auth_token) here, or run with "
        "--ray auto on one of its nodes"
    )


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class _ModelWorker:
    """A Ray actor that runs model steps: what a step loads (a model, cached per process) stays loaded
    for the actor's life, so each actor loads it once."""

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


class RayExecutor:
    """Runs each per-input step as a Ray task with ``num_cpus`` CPUs and ``max_retries`` retries."""

    def __init__(
        self,
        address: str,
        progress: bool = True,
        *,
        num_cpus: int = 1,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        try:
            import ray
        except ImportError as e:  # pragma: no cover - ray is in requirements.lock
            raise InputError(
                "--ray needs the 'ray' extra (ray is not installed): pip install 'llmpipe[ray]'"
            ) from e
        if num_cpus < 1:
            raise InputError(f"RayExecutor: num_cpus must be >= 1, got {num_cpus}")
        self.progress = progress
        self._ray = ray
        self._num_cpus = num_cpus
        if not ray.is_initialized():
            _probe(address)
            try:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
            except ConnectionError as e:
                raise InputError(
                    f"--ray {address}: cannot connect to a Ray cluster ({e}){auth_hint(address)}"
                ) from e
            except ValueError as e:  # an address Ray cannot parse
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise InputError(
                    f"--ray {address}: not a Ray address ({first}); use auto, HOST:PORT or ray://HOST:PORT"
                ) from None
        # The Rust stages use rayon: as many threads as CPUs Ray reserved for the task, not every core
        # of the node. Task env_vars are merged with the job's runtime env (working_dir is inherited).
        self._remote = ray.remote(_call)
        self._options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "max_retries": max_retries,
            "runtime_env": {"env_vars": {"RAYON_NUM_THREADS": str(num_cpus)}},
        }

    @property
    def workers(self) -> int:
        """Tasks the cluster runs at once: its CPUs over the CPUs of one task."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)) // self._num_cpus)

    def map_actors(
        self,
        fn: Callable[..., Any],
        args: Sequence[tuple[Any, ...]],
        desc: str,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        actors: int = 0,
    ) -> list[Any]:
        """``fn(*a)`` for every ``a`` on a pool of actors of ``num_cpus`` CPUs and ``num_gpus`` GPUs
        (``actors`` of them, or as many as the cluster's resources allow, at most one per call): the
        model steps (classifier, encoder), whose model each actor loads once. A lost actor is
        restarted and its calls retried (the steps write by atomic rename). Results in argument order;
        the actors are released at the end."""
        ray = self._ray
        if actors < 1:
            res = ray.cluster_resources()
            fit = [int(res.get("CPU", 1) // num_cpus)] if num_cpus > 0 else []
            fit += [int(res.get("GPU", 0) // num_gpus)] if num_gpus > 0 else []
            actors = max(1, min(fit) if fit else 1)
        actors = min(actors, len(args))
        threads = str(max(1, int(num_cpus)))
        cls = ray.remote(_ModelWorker).options(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            max_restarts=self._options["max_retries"],
            max_task_retries=self._options["max_retries"],
            runtime_env={"env_vars": {"RAYON_NUM_THREADS": threads}},
        )
        pool = [cls.remote() for _ in range(actors)]
        try:
            free = list(range(actors))
            refs: list[Any] = [None] * len(args)
            busy: dict[Any, tuple[int, int]] = {}
            nxt = 0
            while nxt < len(args) or busy:
                while free and nxt < len(args):
                    w = free.pop()
                    r = pool[w].call.options(name=desc).remote(fn, *args[nxt])
                    refs[nxt] = r
                    busy[r] = (w, nxt)
                    nxt += 1
                ready, _ = ray.wait(list(busy), num_returns=1)
                for r in ready:
                    self._get(refs, [r])  # surface the first failure now
                    free.append(busy.pop(r)[0])
            return self._get(refs, refs)
        finally:
            for a in pool:
                ray.kill(a)

    def map(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], desc: str, done: Done | None = None
    ) -> list[Any]:
        from tqdm import tqdm

        ray = self._ray
        task = self._remote.options(**self._options, name=desc)
        refs = [task.remote(fn, *a) for a in args]
        index = {r: j for j, r in enumerate(refs)}
        pending = list(refs)
        with tqdm(total=len(refs), desc=desc, unit="file", disable=not self.progress, leave=False) as bar:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                # surface a failure now, not after every task finished
                results = self._get(refs, ready)
                if done is not None:
                    for r, value in zip(ready, results, strict=True):
                        done(index[r], value)
                bar.update(len(ready))
        return self._get(refs, refs)  # argument order, whatever order the cluster finished them in

    def _get(self, refs: list[Any], ready: list[Any]) -> list[Any]:
        """``ray.get(ready)`` (tasks of ``refs``). Where one failed: the failure of the first task in
        argument order up to the last of ``ready`` (the same error whatever order the cluster ran them
        in; the tasks after those are cancelled), and an llmpipe error as itself, one line, not
        wrapped in Ray's remote traceback."""
        ray = self._ray
        try:
            return list(ray.get(ready))
        except ray.exceptions.RayTaskError:
            # the other failed (and the cancelled) tasks' errors are left unread on purpose: Ray would
            # log each as an "unhandled error" with its remote traceback
            os.environ["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
            upto = max(refs.index(r) for r in ready)
            for r in refs[upto + 1 :]:
                # a task that cannot be cancelled (some actor tasks) runs on
                if r is not None:
                    with contextlib.suppress(Exception):
                        ray.cancel(r)
            for r in refs[: upto + 1]:
                try:
                    ray.get(r)
                except ray.exceptions.RayTaskError as e:
                    if isinstance(e.cause, LlmpipeError):
                        raise e.cause from None
                    raise
            raise
