"""Checkpoints with torch.distributed.checkpoint (DCP): sharded, resharding on load, atomic, pruned.

A checkpoint is a directory ``RUN_DIR/checkpoints/step-NNNNNNNN`` holding the DCP files of the model
and optimizer (keyed by parameter name, so it loads on any number of ranks) and ``train_state.pt``
(step, scheduler, loader position, spike-guard state, every rank's RNG state). It is written under
``.tmp-step-NNNNNNNN`` and renamed by rank 0 once complete, so a directory named ``step-*`` is always
whole. Periodic saves are asynchronous: the state is staged to host memory, then written by a
background thread that talks over its own gloo process group, so training continues meanwhile.
"""

from __future__ import annotations

import re
import shutil
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from llmpipe.train.config import CheckpointConfig

_NAME = re.compile(r"^step-(\d{8})$")
STATE_FILE = "train_state.pt"


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def damage(path: Path) -> str | None:
    """What is wrong with a checkpoint directory (None: intact as far as sizes tell).

    Every byte range the DCP metadata lists must exist in its file, and the train state must load."""
    state = path / STATE_FILE
    if not state.is_file():
        return f"{STATE_FILE} is missing"
    try:
        meta = dcp.FileSystemReader(str(path)).read_metadata()
    except Exception as e:  # noqa: BLE001 - any unreadable metadata means a damaged checkpoint
        return f"its DCP metadata cannot be read ({type(e).__name__})"
    sizes: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        name = info.relative_path
        if name not in sizes:
            f = path / name
            sizes[name] = f.stat().st_size if f.is_file() else -1
        if sizes[name] < 0:
            return f"{name} is missing"
        if sizes[name] < info.offset + info.length:
            return f"{name} is cut short ({sizes[name]} of at least {info.offset + info.length} bytes)"
    try:
        torch.load(state, weights_only=False)
    except Exception as e:  # noqa: BLE001 - a truncated pickle raises several kinds
        return f"{STATE_FILE} cannot be read ({type(e).__name__})"
    return None


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class Checkpointer:
    def __init__(self, run_dir: Path, cfg: CheckpointConfig, *, rank: int, world_size: int) -> None:
        self.root = run_dir / "checkpoints"
        self.cfg = cfg
        self.rank = rank
        self.world_size = world_size
        self._pending: tuple[Future[Any], Path, Path] | None = None
        self._async_group: dist.ProcessGroup | None = None
        if cfg.async_save and dist.is_initialized():
            group = dist.new_group(backend="gloo")  # keeps checkpoint I/O off the training group
            assert isinstance(group, dist.ProcessGroup)  # every rank is a member of a group of all ranks
            self._async_group = group
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob(".tmp-step-*"):  # left by a run killed mid-save
                shutil.rmtree(stale, ignore_errors=True)
        self._barrier()

    def _barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier()

    # -- saving -----------------------------------------------------------------------------------
    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        train_state: dict[str, Any],
        *,
        blocking: bool,
    ) -> None:
        self.wait()  # one save in flight at a time
        final, tmp = step_dir(self.root, step), self.root / f".tmp-step-{step:08d}"
        if final.exists():
            return
        rngs: list[Any] = [None] * self.world_size
        if dist.is_initialized():
            dist.all_gather_object(rngs, _rng_state())
        else:
            rngs = [_rng_state()]
        if self.rank == 0:
            tmp.mkdir(parents=True, exist_ok=True)
            torch.save({**train_state, "rng": rngs, "world_size": self.world_size}, tmp / STATE_FILE)
        self._barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        if blocking or self._async_group is None:
            dcp.save(state, checkpoint_id=str(tmp))
            self._finalize(tmp, final)
            self._barrier()
        else:
            fut = dcp.async_save(state, checkpoint_id=str(tmp), process_group=self._async_group)
            assert isinstance(fut, Future)
            self._pending = (fut, tmp, final)

    def poll(self) -> None:
        """Finalize a background save if it has finished (cheap; call every step)."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        if self._pending is None:
            return
        fut, tmp, final = self._pending
        self._pending = None
        fut.result()  # on rank 0 this returns once every rank's data and the metadata are written
        self._finalize(tmp, final)

    def _finalize(self, tmp: Path, final: Path) -> None:
        if self.rank != 0:
            return
        tmp.rename(final)
        for old in list_checkpoints(self.root)[: -self.cfg.keep]:
            shutil.rmtree(old, ignore_errors=True)

    # -- loading ----------------------------------------------------------------------------------
    def latest(self) -> Path | None:
        """The newest intact checkpoint, as seen by rank 0 (the same answer on every rank).

        A damaged one (a file gone or cut short since it was written) is renamed ``damaged-step-*``,
        kept for inspection, and the one before it is used, with a message saying so."""
        found = None
        if self.rank == 0:
            for path in reversed(list_checkpoints(self.root)):
                problem = damage(path)
                if problem is None:
                    found = str(path)
                    break
                aside = path.with_name(f"damaged-{path.name}")
                shutil.rmtree(aside, ignore_errors=True)
                path.rename(aside)
                print(
                    f"checkpoint {path} is damaged ({problem}); moved to {aside.name}, "
                    "falling back to the previous checkpoint",
                    flush=True,
                )
        box: list[Any] = [found]
        if dist.is_initialized():
            dist.broadcast_object_list(box, src=0)
        return Path(box[0]) if box[0] else None

    def load(
        self, path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, *, restore_rng: bool = True
    ) -> dict[str, Any]:
        """Load model and optimizer (resharded to this run's ranks); returns the saved train state."""
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        saved: dict[str, Any] = torch.load(path / STATE_FILE, weights_only=False)
        if restore_rng:
            rngs = saved["rng"]
            if len(rngs) == self.world_size:
                _set_rng_state(rngs[self.rank])
        return saved

    def close(self) -> None:
        self.wait()
        self._barrier()
