"""Checkpoints with torch.distributed.checkpoint (DCP): sharded, resharding on load, atomic, pruned.

A checkpoint is a directory ``RUN_DIR/checkpoints/step-NNNNNNNN`` holding the DCP files of the model
and optimizer (keyed by parameter name, so it loads on any number of ranks) and ``train_state.pt``
(step, scheduler, loader position, spike-guard state, every rank's RNG state). It is written under
``.tmp-step-NNNNNNNN`` and renamed by rank 0 once complete, so a directory named ``step-*`` is always
whole. Periodic saves are asynchronous: the state is staged to host memory, then written by a
background thread that talks over its own gloo process group, so training continues meanwhile.

A run directory may come from someone else, so nothing in it runs code when it is loaded:
``train_state.pt`` holds only plain values and tensors and is read with ``weights_only=True``; DCP's
``.metadata`` (a pickle) is read by an unpickler that knows only DCP's metadata classes; the non-tensor
values in the ``.distcp`` files (optimizer hyperparameters) are read with ``weights_only=True``. Anything
else is refused with one line naming the file (:class:`UnsafeCheckpointError`).

Every checkpoint records the CRC-32 of each 1 MiB block of each of its files in ``checksums.json``
(the shards' block checksums, computed by the Rust core): each rank checksums the ``.distcp`` files it
wrote right after writing them (still in the page cache; in the background thread for an asynchronous
save), and rank 0 adds ``.metadata`` and ``train_state.pt`` and writes the file before the directory is
renamed to ``step-*``. Every load checks them first (resume on rank 0, export, eval, quantize, prune),
so a file changed on disk, even without changing its size, is found before a weight is read:
:func:`damage` names the byte ranges. This detects corruption (bad disks, partial copies), not
tampering: whoever can rewrite the files can rewrite the checksums, and nothing in a run directory runs
code in any case. A checkpoint written before checksums existed (no ``checksums.json``, and its
``train_state.pt`` does not ask for one) loads unchecked, without a message.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import shutil
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem, SavePlan, SavePlanner
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future as TorchFuture

from llmpipe.data.format import (
    BLOCK_BYTES,
    damaged_blocks,
    describe_ranges,
    file_block_crc32s,
    stays_inside,
)
from llmpipe.errors import LlmpipeError
from llmpipe.train.config import CheckpointConfig

_NAME = re.compile(r"^step-(\d{8})$")
STATE_FILE = "train_state.pt"
METADATA_FILE = ".metadata"
CHECKSUMS_FILE = "checksums.json"
_CHECKSUMS_FORMAT = "llmpipe-checkpoint-checksums"
_MAX_CHECKSUMS_BYTES = 64 << 20  # ~16M blocks of 1 MiB: a 16 TiB checkpoint


class UnsafeCheckpointError(LlmpipeError):
    """A checkpoint file holds a pickle that could run code (or names a file outside its directory)."""


class DamagedCheckpointError(LlmpipeError):
    """A checkpoint's files differ from what was written (checksums, sizes) or are missing."""


class CheckpointMismatchError(LlmpipeError):
    """A checkpoint that does not fit the model it is loaded into (another shape, other parameters):
    ``cause`` is DCP's reason in one line (the message names the checkpoint and the run's config.yaml)."""

    def __init__(self, path: Path, cause: str) -> None:
        self.path, self.cause = path, cause
        run = path.parent.parent
        super().__init__(f"{path} does not fit the model {run / 'config.yaml'} describes ({cause})")


def _mismatch_cause(e: BaseException) -> str | None:
    """DCP's reason a load failed because the state does not fit (a ValueError ``Size mismatch ...``, a
    RuntimeError ``Missing key ...``), also from inside the CheckpointException it wraps them in on each
    rank; None for anything else."""
    found: list[BaseException] = [e]
    if isinstance(e, CheckpointException):
        found = [f[0] if isinstance(f, tuple) else f for f in e.failures.values()]
    for err in found:
        if isinstance(err, (ValueError, RuntimeError, KeyError)) and not isinstance(err, CheckpointException):
            text = str(err).strip().splitlines()
            return (text[0] if text else type(err).__name__)[:300]
    return None


# -- checksums ------------------------------------------------------------------------------------
def file_checksum(path: Path) -> dict[str, Any]:
    """A file's size and the CRC-32 of each 1 MiB block (the shard manifest's representation)."""
    return {
        "bytes": path.stat().st_size,
        "block_bytes": BLOCK_BYTES,
        "block_crc32": file_block_crc32s(path, BLOCK_BYTES).tolist(),
    }


def write_checksums(path: Path, files: dict[str, dict[str, Any]] | None = None) -> None:
    """``checksums.json`` of the checkpoint directory ``path``: ``files`` (already computed) plus the
    metadata's and train state's, checksummed here."""
    files = dict(files or {})
    for name in (METADATA_FILE, STATE_FILE):
        if (path / name).is_file():
            files[name] = file_checksum(path / name)
    body = {"format": _CHECKSUMS_FORMAT, "version": 1, "files": dict(sorted(files.items()))}
    tmp = path / f".{CHECKSUMS_FILE}.tmp"
    tmp.write_text(json.dumps(body, separators=(",", ":")) + "\n")
    tmp.rename(path / CHECKSUMS_FILE)


def _read_checksums(path: Path) -> dict[str, dict[str, Any]] | str:
    """The ``files`` of ``checksums.json``, or what is wrong with it (it is data from the run directory:
    bounded, and every entry's shape checked before use)."""
    f = path / CHECKSUMS_FILE
    if f.stat().st_size > _MAX_CHECKSUMS_BYTES:
        return f"{CHECKSUMS_FILE} is larger than {_MAX_CHECKSUMS_BYTES >> 20} MiB"
    try:
        body = json.loads(f.read_bytes())
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return f"{CHECKSUMS_FILE} cannot be read ({type(e).__name__})"
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("format") != _CHECKSUMS_FORMAT or not isinstance(files, dict):
        return f"{CHECKSUMS_FILE} is not a checksum list of llmpipe"
    for name, entry in files.items():
        ok = (
            _plain_file_name(name)
            and isinstance(entry, dict)
            and type(entry.get("bytes")) is int
            and entry["bytes"] >= 0
            and type(entry.get("block_bytes")) is int
            and entry["block_bytes"] > 0
            and isinstance(entry.get("block_crc32"), list)
            and all(type(c) is int and 0 <= c < 1 << 32 for c in entry["block_crc32"])
        )
        if not ok:
            return f"{CHECKSUMS_FILE} has a malformed entry for {str(name)[:80]!r}"
    return files


def checksum_problem(path: Path, meta: Metadata, wants_checksums: bool) -> str | None:
    """What differs from ``checksums.json`` in the checkpoint directory ``path`` (None: every file as
    written, or a checkpoint from before checksums that does not ask for them: ``wants_checksums`` is
    what its train state says)."""
    if not (path / CHECKSUMS_FILE).is_file():
        return f"{CHECKSUMS_FILE} is missing" if wants_checksums else None
    files = _read_checksums(path)
    if isinstance(files, str):
        return files
    needed = {METADATA_FILE, STATE_FILE} | {info.relative_path for info in (meta.storage_data or {}).values()}
    for name in sorted(needed):
        entry = files.get(name)
        if entry is None:
            return f"{CHECKSUMS_FILE} has no checksum for {name}"
        if not (path / name).is_file():
            return f"{name} is missing"
        bad = damaged_blocks(path / name, entry)
        if bad:
            return (
                f"{name}: {describe_ranges(bad)} differ from their checksums (changed since it was written)"
            )
    return None


# -- loading what a stranger may have written -------------------------------------------------------
#: the globals a DCP ``.metadata`` pickle names (torch dtypes are allowed besides, by type)
_METADATA_GLOBALS = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},  # a torch.layout by its name
    "torch": {"Size"},
    "pathlib": {"Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset"},
}  # fmt: skip
_REFUSED = "a pickle that could run code; llmpipe never writes one"


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata and nothing else: any other global is refused before it is looked up."""

    def __init__(self, file: IO[bytes], path: Path) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if name in _METADATA_GLOBALS.get(module, ()) or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise UnsafeCheckpointError(f"{self.path}: refused: it names {module}.{name}, {_REFUSED}")


def _plain_file_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name


def _stays_in_run(path: Path) -> None:
    """A run's checkpoint (``RUN/checkpoints/step-N``) does not lead outside the run directory through
    a symlink (``checkpoints`` or the step directory linked elsewhere): one line if it does."""
    if _NAME.match(path.name) and path.parent.name == "checkpoints":
        stays_inside(path, path.parent.parent, UnsafeCheckpointError)


class SafeFileSystemReader(dcp.FileSystemReader):
    """DCP's file reader with a metadata unpickler that runs no code, and data files only inside the
    checkpoint directory (by name, and after symlinks are followed)."""

    refused: UnsafeCheckpointError | None = None  # DCP turns a reader's errors into its own

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        try:
            return self._read_metadata(kwargs.get("rank"))
        except UnsafeCheckpointError as e:
            self.refused = e
            raise

    def _read_metadata(self, rank: int | None) -> Metadata:
        path = Path(self._get_metadata_path(rank))
        root = Path(self.path)
        _stays_in_run(root)
        for own in (path.name, STATE_FILE, CHECKSUMS_FILE):
            stays_inside(root / own, root, UnsafeCheckpointError)
        with self.fs.create_stream(path, "rb") as f:
            meta = _MetadataUnpickler(cast(IO[bytes], f), path).load()
        if not isinstance(meta, Metadata):
            raise ValueError(f"{path} holds a {type(meta).__name__}, not DCP metadata")
        for info in (meta.storage_data or {}).values():
            name = getattr(info, "relative_path", None)
            if not _plain_file_name(name):
                raise UnsafeCheckpointError(
                    f"{path}: refused: it names the data file {name!r}, not a file of its own directory"
                )
            stays_inside(root / str(name), root, UnsafeCheckpointError)
        if getattr(meta, "storage_meta", None) is None:
            meta.storage_meta = StorageMeta()
        assert meta.storage_meta is not None
        meta.storage_meta.load_id = self.load_id
        return meta


class ChecksummingWriter(dcp.FileSystemWriter):
    """DCP's file writer that leaves ``checksums.json`` in the checkpoint: each rank checksums the files
    it wrote as soon as they are written (a part file per rank), and the coordinator merges the parts
    with the checksums of the metadata and the train state once every rank is done."""

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> TorchFuture[list[WriteResult]]:
        fut = super().write_data(plan, planner)  # written (DCP's file writer returns a done future)
        root = Path(self.path)
        names = sorted({wr.storage_data.relative_path for wr in fut.wait()})
        part = {name: file_checksum(root / name) for name in names}
        (root / f"{plan.storage_data.prefix}{CHECKSUMS_FILE}").write_text(json.dumps(part))
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        super().finish(metadata, results)  # writes .metadata: every rank's data is written by now
        root = Path(self.path)
        files: dict[str, dict[str, Any]] = {}
        parts = sorted(root.glob(f"__*_{CHECKSUMS_FILE}"))
        for part in parts:
            files.update(json.loads(part.read_text()))
        write_checksums(root, files)
        for part in parts:
            part.unlink()


def _refusal(path: Path | str, what: str, e: pickle.UnpicklingError) -> UnsafeCheckpointError:
    """A weights_only load's failure, in one line (torch's message is several paragraphs)."""
    found = re.search(r"GLOBAL (\S+)", str(e))
    names = f"names {found.group(1)}" if found else "is not plain values and tensors"
    return UnsafeCheckpointError(f"{path}: refused: {what} {names}, {_REFUSED}")


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, but the non-tensor values (optimizer hyperparameters) load with
    ``weights_only=True`` (DCP's own planner unpickles them with ``weights_only=False``)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.refused: UnsafeCheckpointError | None = None

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as e:
            self.refused = _refusal(self.path, f"the value of {fqn} in its .distcp files", e)
            raise self.refused from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


def load_dcp(state: dict[str, Any], path: Path, *, no_dist: bool = False, verify: bool = True) -> None:
    """``dcp.load`` into ``state`` from the checkpoint directory ``path``, running no code from it;
    with ``verify``, every file is checked against ``checksums.json`` first
    (:class:`DamagedCheckpointError` on a mismatch)."""
    reader, planner = SafeFileSystemReader(str(path)), SafeLoadPlanner(path)
    try:  # first alone: DCP logs a failed metadata read with a traceback, then tries other files
        meta = reader.read_metadata()
    except UnsafeCheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged file raises several kinds
        raise DamagedCheckpointError(
            f"{path}: its DCP metadata cannot be read ({type(e).__name__}: {e})"
        ) from None
    if verify:
        problem = _size_problem(path, meta) or checksum_problem(path, meta, _wants_checksums(path))
        if problem is not None:
            raise DamagedCheckpointError(f"checkpoint {path} is damaged ({problem})")
    try:
        dcp.load(state, checkpoint_id=str(path), storage_reader=reader, planner=planner, no_dist=no_dist)
    except (Exception, CheckpointException) as e:  # DCP rewraps errors; a refusal is said as it is
        failures = e.failures.values() if isinstance(e, CheckpointException) else []
        found = [f[0] if isinstance(f, tuple) else f for f in failures]
        for refused in (reader.refused, planner.refused, *found):
            if isinstance(refused, UnsafeCheckpointError):
                raise UnsafeCheckpointError(str(refused)) from None
        cause = _mismatch_cause(e)
        if cause is not None:
            raise CheckpointMismatchError(path, cause) from None
        raise


def load_train_state(path: Path) -> dict[str, Any]:
    """``train_state.pt`` with ``weights_only=True`` (plain values and tensors only)."""
    stays_inside(path, path.parent, UnsafeCheckpointError)
    try:
        state = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" in str(e):
            raise _refusal(path, "it", e) from None
        raise
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise ValueError(f"{path} holds no train state")
    return state


def _plain(value: Any, where: str) -> Any:
    """``value`` as what ``torch.load(weights_only=True)`` reads back: plain Python values, containers
    and tensors (numpy values become Python ones). Anything else is a bug in the state's owner."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.Tensor)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    raise TypeError(f"train state {where} is a {type(value).__name__}: save plain values or tensors")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def check_step(step: int | None) -> None:
    """A checkpoint step asked for (``--step``) is 0 or more: one line if not."""
    if step is not None and step < 0:
        raise LlmpipeError(f"--step {step}: a checkpoint's step is 0 or more")


def chosen_checkpoint(run_dir: Path, step: int | None = None) -> Path:
    """A run's checkpoint at ``step`` (default: the latest complete one); one LlmpipeError line if none."""
    found = list_checkpoints(run_dir / "checkpoints")
    check_step(step)
    if step is not None:
        path = step_dir(run_dir / "checkpoints", step)
        if path not in found:
            raise LlmpipeError(f"{path}: no such checkpoint (have {[p.name for p in found]})")
        return path
    if not found:
        raise LlmpipeError(f"{run_dir}/checkpoints: no checkpoint yet")
    return found[-1]


def _wants_checksums(path: Path) -> bool:
    """Whether the checkpoint's train state says it was written with ``checksums.json`` (a train state
    that cannot be read says nothing here: the checksums, or the load, find what is wrong with it)."""
    try:
        return bool(load_train_state(path / STATE_FILE).get("checksums"))
    except UnsafeCheckpointError:
        raise
    except Exception:  # noqa: BLE001 - missing or damaged: the caller's checks say which
        return False


def damage(path: Path, *, checksums: bool = True) -> str | None:
    """What is wrong with a checkpoint directory (None: intact).

    Every byte range the DCP metadata lists must exist in its file, the train state must load, and
    (with ``checksums``) every file must match ``checksums.json``."""
    state = path / STATE_FILE
    if not state.is_file():
        return f"{STATE_FILE} is missing"
    try:
        meta = SafeFileSystemReader(str(path)).read_metadata()
    except UnsafeCheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - any unreadable metadata means a damaged checkpoint
        return f"its DCP metadata cannot be read ({type(e).__name__})"
    try:
        saved = load_train_state(state)  # before the checksums: a planted pickle is refused as such
    except UnsafeCheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - a truncated file raises several kinds
        return _size_problem(path, meta) or f"{STATE_FILE} cannot be read ({type(e).__name__})"
    problem = _size_problem(path, meta)
    if problem is None and checksums:
        problem = checksum_problem(path, meta, bool(saved.get("checksums")))
    return problem


def _size_problem(path: Path, meta: Metadata) -> str | None:
    """A data file the metadata lists that is missing or shorter than the byte ranges it lists."""
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


def _aside(path: Path) -> Path:
    """A new name for a damaged checkpoint, kept for inspection: ``damaged-step-N``, or
    ``damaged-step-N-2``, ``-3``, ... where an earlier damaged copy of the same step is kept already."""
    aside, n = path.with_name(f"damaged-{path.name}"), 1
    while aside.exists() or aside.is_symlink():
        n += 1
        aside = path.with_name(f"damaged-{path.name}-{n}")
    return aside


class Checkpointer:
    def __init__(
        self, run_dir: Path, cfg: CheckpointConfig, *, rank: int, world_size: int, frozen_base: bool = False
    ) -> None:
        """``frozen_base``: save and load only the parameters that train (LoRA's adapters), not the base."""
        self.root = run_dir / "checkpoints"
        self.cfg = cfg
        self.options = StateDictOptions(ignore_frozen_params=True, strict=False) if frozen_base else None
        self.rank = rank
        self.world_size = world_size
        self._pending: tuple[Future[Any], Path, Path] | None = None
        self._verified: set[Path] = set()  # written or checked by this process: not checksummed again
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
            saved = {**train_state, "rng": rngs, "world_size": self.world_size, "checksums": CHECKSUMS_FILE}
            saved = _plain(saved, "train_state")
            torch.save(saved, tmp / STATE_FILE)
        self._barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer, options=self.options)
        state = {"model": model_sd, "optim": optim_sd}
        writer = ChecksummingWriter(str(tmp))
        if blocking or self._async_group is None:
            dcp.save(state, checkpoint_id=str(tmp), storage_writer=writer)
            self._finalize(tmp, final)
            self._barrier()
        else:
            fut = dcp.async_save(
                state, checkpoint_id=str(tmp), storage_writer=writer, process_group=self._async_group
            )
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
        self._verified.add(final)
        for old in list_checkpoints(self.root)[: -self.cfg.keep]:
            self._verified.discard(old)
            shutil.rmtree(old, ignore_errors=True)

    # -- loading ----------------------------------------------------------------------------------
    def latest(self) -> Path | None:
        """The newest intact checkpoint, as seen by rank 0 (the same answer on every rank).

        A damaged one (a file gone, cut short or changed since it was written: sizes and checksums)
        is renamed ``damaged-step-*``, kept for inspection, and the one before it is used, with one line
        saying so. When every checkpoint is damaged the run stops with one line (it does not start
        over silently). One that holds a pickle that could run code stops the run on every rank with
        one line."""
        found: str | None = None
        refused: str | None = None
        stop: str | None = None
        if self.rank == 0:
            damaged: list[tuple[Path, str, str]] = []
            for path in reversed(list_checkpoints(self.root)):
                try:
                    problem = damage(path, checksums=path not in self._verified)
                except UnsafeCheckpointError as e:
                    refused = str(e)
                    break
                if problem is None:
                    self._verified.add(path)
                    found = str(path)
                    break
                aside = _aside(path)
                path.rename(aside)
                self._verified.discard(path)
                damaged.append((path, problem, aside.name))
            if found is not None:
                for path, problem, aside_name in damaged:
                    print(
                        f"checkpoint {path} is damaged ({problem}); moved to {aside_name}, "
                        f"falling back to {Path(found).name}",
                        flush=True,
                    )
            elif damaged and refused is None:
                path, problem, aside_name = damaged[0]
                more = (
                    f" (and {len(damaged) - 1} earlier one(s), moved aside too)" if len(damaged) > 1 else ""
                )
                stop = (
                    f"checkpoint {path} is damaged ({problem}); moved to {aside_name}{more}, and there is "
                    "no earlier checkpoint to fall back to: run again to start from step 0"
                )
        box: list[Any] = [found, refused, stop]
        if dist.is_initialized():
            dist.broadcast_object_list(box, src=0)
        if box[1]:
            raise UnsafeCheckpointError(box[1])
        if box[2]:
            raise DamagedCheckpointError(box[2])
        return Path(box[0]) if box[0] else None

    def load(
        self, path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, *, restore_rng: bool = True
    ) -> dict[str, Any]:
        """Load model and optimizer (resharded to this run's ranks); returns the saved train state."""
        model_sd, optim_sd = get_state_dict(model, optimizer, options=self.options)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        load_dcp(state, path, verify=False)  # latest() checked it on rank 0
        set_state_dict(
            model,
            optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            options=self.options,
        )
        saved = load_train_state(path / STATE_FILE)
        if restore_rng:
            rngs = saved["rng"]
            if len(rngs) == self.world_size:
                _set_rng_state(rngs[self.rank])
        return saved

    def close(self) -> None:
        self.wait()
        self._barrier()
