"""Unstructured and 2:4 pruning of the block Linears by magnitude or Wanda scores.

magnitude: score = |W|; the smallest ``sparsity`` share of each layer is removed (exact count per layer).
wanda (Sun et al., 2023): score = |W_ij| * ||X_j||_2 over calibration activations of the layer's input;
compared within each output row, as in the paper. 2:4: in every group of 4 consecutive input weights
of a row, the 2 lowest scores are removed (50% sparsity, the layout sparse tensor cores accelerate).
The embedding and output head are left dense. Masks (True = kept) are returned by parameter name.
"""

from __future__ import annotations

import torch
from torch import nn

from llmpipe.errors import ConfigError


def prunable(model: nn.Module) -> list[str]:
    """Names of the block Linear modules."""
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.startswith("layers.")]


def check_sparsity(sparsity: float | None, structure: str) -> float:
    if structure == "2:4":
        if sparsity is not None and abs(sparsity - 0.5) > 1e-9:
            raise ConfigError(f"--structure 2:4 means sparsity 0.5, got --sparsity {sparsity}")
        return 0.5
    if sparsity is None:
        raise ConfigError(f"--structure {structure} needs --sparsity S in (0, 1)")
    if not 0.0 < sparsity < 1.0:
        raise ConfigError(f"--sparsity must be in (0, 1), got {sparsity}")
    return sparsity


@torch.no_grad()
def input_norms(
    model: nn.Module, names: list[str], calib: torch.Tensor, batch: int = 8
) -> dict[str, torch.Tensor]:
    """Per-input-feature L2 norm of each named module's input over the calibration tokens."""
    sq: dict[str, torch.Tensor] = {}
    hooks = []
    for name in names:

        def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], _o: object, name: str = name) -> None:
            x = args[0].detach().float().reshape(-1, args[0].shape[-1])
            sq[name] = sq.get(name, torch.zeros(x.shape[1], dtype=torch.float64)) + (x * x).sum(0).double()

        hooks.append(model.get_submodule(name).register_forward_hook(hook))
    try:
        for i in range(0, len(calib), batch):
            model(calib[i : i + batch])
    finally:
        for h in hooks:
            h.remove()
    return {n: sq[n].sqrt().float() for n in names}


def _mask(score: torch.Tensor, sparsity: float, structure: str, per_row: bool) -> torch.Tensor:
    rows, cols = score.shape
    if structure == "2:4":
        if cols % 4:
            raise ConfigError(f"2:4 needs input widths divisible by 4, got {cols}")
        g = score.reshape(rows, cols // 4, 4)
        drop = g.argsort(-1)[..., :2]
        keep = torch.ones_like(g, dtype=torch.bool).scatter_(-1, drop, False)
        return keep.reshape(rows, cols)
    if per_row:
        k = round(sparsity * cols)
        drop = score.argsort(1)[:, :k]
        return torch.ones_like(score, dtype=torch.bool).scatter_(1, drop, False)
    k = round(sparsity * score.numel())
    drop = score.flatten().argsort()[:k]
    return torch.ones(score.numel(), dtype=torch.bool).scatter_(0, drop, False).reshape(rows, cols)


@torch.no_grad()
def prune_weights(
    model: nn.Module, method: str, sparsity: float, structure: str, calib: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """Zero the pruned weights in place; return the masks {param name: bool, True = kept}."""
    names = prunable(model)
    if method == "wanda" and calib is None:
        raise ConfigError("wanda needs calibration data: pass --calib SHARDS")
    norms = input_norms(model, names, calib) if calib is not None and method == "wanda" else {}
    masks: dict[str, torch.Tensor] = {}
    for name in names:
        w: torch.Tensor = model.get_submodule(name).weight  # type: ignore[assignment]
        score = w.abs() * norms[name][None, :] if method == "wanda" else w.abs()
        mask = _mask(score, sparsity, structure, per_row=method == "wanda")
        w.mul_(mask)
        masks[f"{name}.weight"] = mask
    return masks


def sparsity_of(model: nn.Module, names: list[str] | None = None) -> float:
    names = names or prunable(model)
    weights: list[torch.Tensor] = [model.get_submodule(n).weight for n in names]  # type: ignore[misc]
    zeros = sum(int((w == 0).sum()) for w in weights)
    total = sum(w.numel() for w in weights)
    return zeros / total
