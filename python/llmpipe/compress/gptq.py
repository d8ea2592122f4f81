"""GPTQ (Frantar et al., 2022) for group-wise symmetric int4, written into torchao's int4 layout.

For each Linear, the Hessian of the layer-wise squared error is ``H = 2/n X^T X`` over calibration
activations. Columns are quantized left to right; the rounding error of a column, divided by the
diagonal of the upper Cholesky factor of ``H^-1``, is fed back into the columns not yet quantized, so
they compensate. A group's scale is chosen (absmax / 7.5, levels -8..7) from the already-updated weights
when the group starts. Blocks are processed in order, each calibrated on the output of the blocks
before it already quantized (sequential GPTQ); the token embedding has no input activations and is
rounded to nearest. The result is the same tensor type and the same bits as ``int4`` RTN.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from llmpipe.compress.rtn import apply_rtn
from llmpipe.compress.spec import QuantSpec
from llmpipe.progress import Progress

QMIN, QMAX = -8, 7


def gptq_weight(
    w: torch.Tensor, h: torch.Tensor, group_size: int, damp: float = 0.01
) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in], h [in, in] -> (codes int8 [out, in] in [-8, 7], scales fp32 [out, in/group_size])."""
    w = w.detach().float().clone()
    h = h.double().clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damp * torch.diag(h).mean() * torch.eye(h.shape[0], dtype=h.dtype)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True).float()
    rows, cols = w.shape
    codes = torch.empty(rows, cols, dtype=torch.int8)
    scales = torch.empty(rows, cols // group_size)
    scale = torch.ones(rows)
    for j in range(cols):
        if j % group_size == 0:
            amax = w[:, j : j + group_size].abs().amax(1)
            scale = (amax / ((QMAX - QMIN) / 2)).clamp(min=1e-12)
            scales[:, j // group_size] = scale
        q = torch.clamp(torch.round(w[:, j] / scale), QMIN, QMAX)
        codes[:, j] = q.to(torch.int8)
        err = (w[:, j] - q * scale) / hinv[j, j]
        w[:, j + 1 :] -= err[:, None] * hinv[j, j + 1 :][None, :]
    return codes, scales


@torch.no_grad()
def _hessians(
    model: nn.Module, names: list[str], calib: torch.Tensor, batch: int = 8
) -> dict[str, torch.Tensor]:
    hs: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    hooks = []
    for name in names:
        mod = model.get_submodule(name)

        def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], _out: object, name: str = name) -> None:
            x = args[0].detach().float().reshape(-1, args[0].shape[-1])
            h = hs.setdefault(name, torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64))
            h += 2 * (x.T @ x).double()
            counts[name] = counts.get(name, 0) + x.shape[0]

        hooks.append(mod.register_forward_hook(hook))
    try:
        for i in range(0, len(calib), batch):
            model(calib[i : i + batch])
    finally:
        for hk in hooks:
            hk.remove()
    return {n: hs[n] / counts[n] for n in names}


def _install(model: nn.Module, spec: QuantSpec, name: str, codes: torch.Tensor, scales: torch.Tensor) -> None:
    """RTN-quantize the module to get torchao's int4 tensor, then overwrite its codes and scales."""
    apply_rtn(model, spec, only=lambda fqn: fqn == name)
    t: Any = model.get_submodule(name).weight
    t.qdata.copy_(codes)
    t.scale.copy_(scales.to(t.scale.dtype))
    t.zero_point.zero_()


@torch.no_grad()
def apply_gptq(
    model: nn.Module,
    spec: QuantSpec,
    calib: torch.Tensor,
    damp: float = 0.01,
    progress: bool = False,
    blocks_only: bool = False,
) -> None:
    """``progress``: a bar (terminal) or a line every few seconds (log) over the Linears quantized.
    ``blocks_only``: the output head and the token embedding stay unquantized."""
    groups: list[list[str]] = []
    for i, _ in enumerate(model.layers):  # type: ignore[arg-type]
        groups.append(
            [
                f"layers.{i}.{m}"
                for m in ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "ffn.w1", "ffn.w3", "ffn.w2")
            ]
        )
    if not blocks_only:
        groups.append(["output"])
    bar = Progress(sum(map(len, groups)), "gptq", "layers") if progress else None
    try:
        for names in groups:
            hs = _hessians(model, names, calib)
            for name in names:
                w: Any = model.get_submodule(name).weight
                codes, scales = gptq_weight(w, hs[name], spec.group_size, damp)
                _install(model, spec, name, codes, scales)
                if bar is not None:
                    bar.update(1, name)
    finally:
        if bar is not None:
            bar.close()
    if not blocks_only:
        apply_rtn(model, spec, only=lambda fqn: fqn == "tok_embeddings")
