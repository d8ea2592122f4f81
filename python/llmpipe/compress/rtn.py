"""Round-to-nearest PTQ with torchao's ``quantize_`` (CPU): int8 weight-only (per output channel),
int8 dynamic activations x int8 weights, and group-wise symmetric int4 weight-only (``IntxWeightOnlyConfig``;
torchao's ``Int4WeightOnlyConfig`` needs CUDA). The embedding is quantized weight-only in every case."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from llmpipe.compress.spec import QuantSpec
from llmpipe.quiet import quiet_imports


def _configs(spec: QuantSpec) -> tuple[object, object]:
    """(config for the Linears, config for the Embedding)."""
    with quiet_imports():
        from torchao.quantization import (
            Int8DynamicActivationInt8WeightConfig,
            Int8WeightOnlyConfig,
            IntxWeightOnlyConfig,
        )
        from torchao.quantization.granularity import PerGroup

    if spec.method == "int8":
        return Int8WeightOnlyConfig(), Int8WeightOnlyConfig()
    if spec.method == "int8-dynamic":
        return Int8DynamicActivationInt8WeightConfig(), Int8WeightOnlyConfig()
    int4 = IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(spec.group_size))  # type: ignore[attr-defined]
    return int4, int4


def apply_rtn(model: nn.Module, spec: QuantSpec, only: Callable[[str], bool] = lambda _: True) -> None:
    """Quantize (in place) every Linear and Embedding whose name passes ``only``."""
    with quiet_imports():
        from torchao.quantization import quantize_

    linear_cfg, emb_cfg = _configs(spec)
    quantize_(model, linear_cfg, filter_fn=lambda m, fqn: isinstance(m, nn.Linear) and only(fqn))  # type: ignore[arg-type]
    quantize_(model, emb_cfg, filter_fn=lambda m, fqn: isinstance(m, nn.Embedding) and only(fqn))  # type: ignore[arg-type]
