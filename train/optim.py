"""AdamW with decoupled weight decay on matrices only, warmup + cosine schedule, gradient clipping."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from train.config import OptimConfig


def param_groups(model: nn.Module, cfg: OptimConfig) -> list[dict[str, object]]:
    """Weight decay on 2-D weights of linear layers; never on norms or biases; embeddings as configured."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_embedding = "tok_embeddings" in name
        if p.ndim < 2 or (is_embedding and not cfg.decay_embeddings):
            no_decay.append(p)
        else:
            decay.append(p)
    return [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        param_groups(model, cfg),
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        fused=cfg.fused or None,
    )


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the peak lr for optimizer step ``step`` (0-based): linear warmup, cosine to min."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    opt: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, cfg.warmup_steps, total_steps, cfg.min_lr_ratio)
    )


def clip_grad_norm(
    model: nn.Module, max_norm: float, pp_group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """The global gradient norm (over all shards, and all pipeline stages when ``pp_group`` is given)
    before clipping; clips when ``max_norm > 0``."""
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True)
    if hasattr(norm, "full_tensor"):  # DTensor: reduce the partial norms across the mesh
        norm = norm.full_tensor()
    if pp_group is not None:  # each stage holds other parameters: sum the squares over the stages
        sq = norm.float() ** 2
        dist.all_reduce(sq, group=pp_group)
        norm = sq.sqrt()
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=True)
    return norm
