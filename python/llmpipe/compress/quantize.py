"""Quantize a model in memory by any method of ``spec.METHODS``: the one entry point of the library."""

from __future__ import annotations

import torch
from torch import nn

from llmpipe.compress.spec import QuantSpec, check, targets
from llmpipe.errors import InputError


def quantize_model(
    model: nn.Module, spec: QuantSpec, calib: torch.Tensor | None = None, *, progress: bool = False
) -> nn.Module:
    """Quantize ``model`` in place (fp32, CPU, eval) and return it. GPTQ needs ``calib`` token rows;
    ``progress`` shows its calibration layer by layer (a bar, or a line every few seconds in a log)."""
    check(spec, model)
    if spec.method in ("int8", "int8-dynamic", "int4"):
        from llmpipe.compress.rtn import apply_rtn

        apply_rtn(model, spec)
    elif spec.method == "nf4":
        from llmpipe.compress.nf4 import apply_nf4

        apply_nf4(model, spec.group_size, targets(model))
    else:
        if calib is None:
            raise InputError("gptq-int4 needs calibration data: pass --calib SHARDS")
        from llmpipe.compress.gptq import apply_gptq

        apply_gptq(model, spec, calib, progress=progress)
    round_scales(model)
    return model.eval()


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
