"""Process group, device mesh and FSDP2 wrapping.

``full``: one mesh dimension, parameters sharded over every rank (FSDP / ZeRO-3).
``hybrid``: a 2-D mesh (replicate, shard): sharded within groups of ``shard_size`` ranks (a node),
replicated across them (HSDP). ``none``: the same 2-D mesh with shard size 1, i.e. plain replication
(DDP semantics: full parameters on every rank, gradients all-reduced).

Each block is its own FSDP group (one all-gather / reduce-scatter per block), then the root takes the
embeddings, final norm and output layer. Mixed precision: bf16 parameters in compute, fp32 gradient
reduction, fp32 master weights and optimizer state.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from llmpipe.errors import ConfigError
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from train.config import ParallelConfig
from train.model import Transformer


@dataclass
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(cfg: ParallelConfig) -> Dist:
    """Start the process group from torchrun's environment (a single process works without torchrun)."""
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        raise ConfigError("parallel.device=cuda but CUDA is not available")
    if want_cuda:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = cfg.backend if cfg.backend != "auto" else ("nccl" if want_cuda else "gloo")
    if backend == "nccl" and not want_cuda:
        raise ConfigError("parallel.backend=nccl needs CUDA devices")
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        os.environ.setdefault("RANK", str(rank))
        os.environ.setdefault("WORLD_SIZE", str(world))
        dist.init_process_group(
            backend=backend, rank=rank, world_size=world, device_id=device if want_cuda else None
        )
    mesh = build_mesh(cfg, world, device.type)
    return Dist(rank, world, local_rank, device, mesh)


def build_mesh(cfg: ParallelConfig, world: int, device_type: str) -> DeviceMesh:
    if cfg.sharding == "full":
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    shard = 1 if cfg.sharding == "none" else cfg.shard_size or int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if shard < 1 or world % shard:
        raise ConfigError(f"parallel.shard_size={shard} must divide the world size {world}")
    return init_device_mesh(device_type, (world // shard, shard), mesh_dim_names=("replicate", "shard"))


def apply_fsdp(model: nn.Module, cfg: ParallelConfig, mesh: DeviceMesh) -> nn.Module:
    """Optionally compile each block, then ``fully_shard`` each block and the root.

    On a single rank there is nothing to shard: the model stays a plain module (FSDP would only copy
    parameters and gradients through its buffers) and bf16 comes from ``autocast`` instead."""
    layers = model.get_submodule("layers")
    assert isinstance(layers, nn.ModuleList)
    if isinstance(model, Transformer):
        model.activation_checkpointing = cfg.activation_checkpointing
    if mesh.size() == 1:
        if cfg.compile:
            for block in layers:
                block.compile()
        return model
    if cfg.mixed_precision == "bf16":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        mp = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    for i, block in enumerate(layers):
        if cfg.compile:
            block.compile()  # in place: parameter names (and so checkpoints) stay the same
        # the last block's parameters are needed again at once by backward: keep them gathered
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    return model


def autocast(cfg: ParallelConfig, d: Dist) -> contextlib.AbstractContextManager[None]:
    """bf16 compute on a single rank (with several, FSDP's MixedPrecisionPolicy does it)."""
    if d.world_size == 1 and cfg.mixed_precision == "bf16":
        return torch.autocast(d.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def all_reduce_(t: torch.Tensor) -> torch.Tensor:
    """Sum over ranks in place (no host sync on CUDA); returns ``t``."""
    if dist.is_initialized():
        dist.all_reduce(t)
    return t


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()
