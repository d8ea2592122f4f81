"""AdamW with decoupled weight decay on matrices only, learning-rate schedules, gradient clipping.

Schedules (``optim.schedule``), after a linear warmup of ``warmup_steps`` from 0 to the peak:
``cosine`` to ``min_lr_ratio * lr`` at ``train.steps``; ``linear`` to the same minimum; ``wsd``
(warmup-stable-decay) holds the peak and decays linearly to the minimum over the last
``decay_fraction`` of the steps; ``constant`` holds the peak. With a batch-size ramp the rate is also
scaled by ``BatchSchedule.lr_scale`` (train/schedule.py).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from llmpipe.train.config import OptimConfig
from llmpipe.train.schedule import BatchSchedule


def param_groups(model: nn.Module, cfg: OptimConfig) -> list[dict[str, object]]:
    """Weight decay on 2-D weights of linear layers; never on norms or biases; embeddings as configured.
    With muP (the model's ``cfg.mup_base_dim``), the hidden matrices (every block's linear layers) get
    lr / width_mult, Adam's muP rule; embeddings, output and norms keep lr."""
    decay, no_decay, hidden = [], [], []
    mult = float(getattr(getattr(model, "cfg", None), "width_mult", 1.0))
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_embedding = "tok_embeddings" in name
        if p.ndim < 2 or (is_embedding and not cfg.decay_embeddings):
            no_decay.append(p)
        elif mult != 1.0 and name.startswith("layers."):
            hidden.append(p)
        else:
            decay.append(p)
    groups: list[dict[str, object]] = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if hidden:
        groups.append({"params": hidden, "weight_decay": cfg.weight_decay, "lr": cfg.lr / mult})
    return groups


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, shard_mesh: DeviceMesh | None = None
) -> torch.optim.AdamW:
    """AdamW; with ``shard_mesh`` (ZeRO-1, train/zero.py) its states sharded over that mesh."""
    kwargs: dict[str, Any] = {
        "lr": cfg.lr,
        "betas": (cfg.beta1, cfg.beta2),
        "eps": cfg.eps,
        "fused": cfg.fused is True or None,  # "auto" is settled per device by resolve_for_device
    }
    if shard_mesh is not None:
        from llmpipe.train.zero import ShardedAdamW

        return ShardedAdamW(param_groups(model, cfg), shard_mesh, **kwargs)
    return torch.optim.AdamW(param_groups(model, cfg), **kwargs)


def lr_factor(
    step: int, warmup: int, total: int, min_ratio: float, kind: str = "cosine", decay_fraction: float = 0.2
) -> float:
    """Multiplier of the peak lr for optimizer step ``step`` (0-based)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if kind == "constant" or total <= warmup:
        return 1.0
    if kind == "wsd":
        decay_from = max(warmup, total - math.ceil(decay_fraction * total))
        if step < decay_from:
            return 1.0
        progress = min(1.0, (step - decay_from) / max(1, total - decay_from))
        return 1.0 - (1.0 - min_ratio) * progress
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if kind == "linear":
        return 1.0 - (1.0 - min_ratio) * progress
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    opt: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int, batches: BatchSchedule | None = None
) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(s: int) -> float:
        f = lr_factor(s, cfg.warmup_steps, total_steps, cfg.min_lr_ratio, cfg.schedule, cfg.decay_fraction)
        return f * (batches.lr_scale(s, cfg.batch_lr) if batches is not None else 1.0)

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def clip_grad_norm(
    model: nn.Module, max_norm: float, pp_group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """The global gradient norm (over all shards, and all pipeline stages when ``pp_group`` is given)
    before clipping; clips when ``max_norm > 0``."""
    params = [p for p in model.parameters() if p.grad is not None]
    # by device mesh: DTensors of different meshes (FSDP's, expert parallel's) do not mix in one op
    by_mesh: dict[object, list[torch.Tensor]] = {}
    for p in params:
        by_mesh.setdefault(getattr(p, "device_mesh", None), []).append(p)
    norms = []
    for group in by_mesh.values():
        grads = [p.grad for p in group if p.grad is not None]  # all: the filter is for the type checker
        norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        if hasattr(norm, "full_tensor"):  # DTensor: reduce the partial norms across the mesh
            norm = norm.full_tensor()
        norms.append(norm)
    norm = norms[0] if len(norms) == 1 else torch.stack([n.float() for n in norms]).norm()
    if pp_group is not None:  # each stage holds other parameters: sum the squares over the stages
        sq = norm.float() ** 2
        dist.all_reduce(sq, group=pp_group)
        norm = sq.sqrt()
    if max_norm > 0:
        for group in by_mesh.values():
            torch.nn.utils.clip_grads_with_norm_(group, max_norm, norm, foreach=True)
    return norm
