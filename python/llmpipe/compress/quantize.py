"""Quantize a model in memory by any method of ``spec.METHODS``: the one entry point of the library."""

from __future__ import annotations

import torch
from torch import nn

from llmpipe.compress.spec import QuantSpec, check, targets
from llmpipe.errors import InputError


def quantize_model(
    model: nn.Module,
    spec: QuantSpec,
    calib: torch.Tensor | None = None,
    *,
    progress: bool = False,
    blocks_only: bool = False,
) -> nn.Module:
    """Quantize ``model`` in place (fp32, CPU, eval) and return it. GPTQ needs ``calib`` token rows;
    ``progress`` shows its calibration layer by layer (a bar, or a line every few seconds in a log).
    ``blocks_only``: only the Linears of the transformer blocks; the token embedding and the output head
    stay dense, held at fp16 precision like every other dense tensor (what the compressed-tensors
    format stores, as llmcompressor's W8A16 / W4A16 schemes do)."""
    check(spec, model)
    if blocks_only and spec.method not in ("int8", "int4", "gptq-int4"):
        raise InputError(f"{spec.method} has no blocks-only form (int8, int4 and gptq-int4 do)")
    if spec.method in ("int8", "int8-dynamic", "int4"):
        from llmpipe.compress.rtn import apply_rtn

        if blocks_only:
            apply_rtn(model, spec, only=lambda fqn: fqn.startswith("layers."))
        else:
            apply_rtn(model, spec)
    elif spec.method == "nf4":
        from llmpipe.compress.nf4 import apply_nf4

        apply_nf4(model, spec.group_size, targets(model))
    else:
        if calib is None:
            raise InputError("gptq-int4 needs calibration data: pass --calib SHARDS")
        from llmpipe.compress.gptq import apply_gptq

        apply_gptq(model, spec, calib, progress=progress, blocks_only=blocks_only)
    round_scales(model)
    if blocks_only:
        round_dense(model)
    return model.eval()


@torch.no_grad()
def round_dense(model: nn.Module) -> None:
    """Hold every parameter that is not quantized (norms, embedding, output head) at fp16 precision."""
    for p in model.parameters():
        if not hasattr(p, "tensor_data_names"):
            p.copy_(p.half().to(p.dtype))


@torch.no_grad()
def round_scales(model: nn.Module) -> None:
    """Hold every scale at fp16 precision, the precision they are stored in (llmpipe.compress.store)."""
    for t in model.state_dict().values():
        if hasattr(t, "tensor_data_names"):
            s = t.scale  # type: ignore[attr-defined]
            s.copy_(s.half().to(s.dtype))
    for name, b in model.named_buffers():
        if name.endswith("absmax"):  # NF4
            b.copy_(b.half().to(b.dtype))
