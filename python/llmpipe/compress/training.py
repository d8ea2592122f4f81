"""What the trainer needs from compression: QAT fake quantization and pruning masks held in training.

- ``qat.scheme`` int4 / int8: every Linear and the embedding get torchao's fake quantizers
  (``QATConfig(IntxWeightOnlyConfig(...), step="prepare")``) on the meta model, before FSDP2 shards it;
  parameter names do not change, so checkpoints and resume work as usual. The quantizers are off until
  ``qat.from_step``. ``llmpipe quantize RUN`` converts: the same scheme, quantized for real.
- pruning masks: when the run starts from an HF checkpoint that holds ``masks.safetensors``
  (``model.init_from`` / ``init.from_hf``, train/init_from.py loads them into ``set_masks``), the masks
  are re-applied after every optimizer step (pruned weights stay exactly zero whatever AdamW's momentum
  and weight decay do), saved in each checkpoint's train state and restored on resume.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from llmpipe.errors import ConfigError
from llmpipe.quiet import quiet_imports


def qat_base_config(scheme: str, group_size: int) -> Any:
    with quiet_imports():
        from torchao.quantization import IntxWeightOnlyConfig
        from torchao.quantization.granularity import PerAxis, PerGroup

    if scheme == "int4":
        return IntxWeightOnlyConfig(
            weight_dtype=torch.int4,  # type: ignore[attr-defined]
            granularity=PerGroup(group_size),
        )
    if scheme == "int8":
        return IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
    raise ConfigError(f"qat.scheme must be none, int4 or int8, got {scheme!r}")


def _fake_quantizers(model: nn.Module) -> list[Any]:
    return [
        m.weight_fake_quantizer
        for m in model.modules()
        if getattr(m, "weight_fake_quantizer", None) is not None
    ]


class TrainCompression:
    def __init__(self, qat_scheme: str, qat_group_size: int, qat_from_step: int) -> None:
        self.scheme, self.group_size, self.from_step = qat_scheme, qat_group_size, qat_from_step
        self.masks: dict[str, torch.Tensor] = {}  # full masks by parameter name (True = kept)
        self._local: dict[str, torch.Tensor] = {}  # the same, laid out like each (sharded) parameter
        if self.scheme != "none":
            qat_base_config(self.scheme, self.group_size)
            if self.group_size <= 0 or self.from_step < 0:
                raise ConfigError("qat.group_size must be positive and qat.from_step non-negative")

    @property
    def active(self) -> bool:
        return self.scheme != "none"

    # -- model building ---------------------------------------------------------------------------
    def prepare(self, model: nn.Module) -> None:
        """Before sharding: swap in fake-quantized Linear/Embedding modules (QAT)."""
        if self.scheme == "none":
            return
        with quiet_imports():
            from torchao.quantization import quantize_
            from torchao.quantization.qat import QATConfig

        for name, m in model.named_modules():
            for width in (
                [m.in_features]
                if isinstance(m, nn.Linear)
                else [m.embedding_dim]
                if isinstance(m, nn.Embedding)
                else []
            ):
                if self.scheme == "int4" and width % self.group_size:
                    raise ConfigError(
                        f"qat.group_size {self.group_size} does not divide the width {width} of {name}"
                    )
        quantize_(model, QATConfig(qat_base_config(self.scheme, self.group_size), step="prepare"),
                  filter_fn=lambda m, _fqn: isinstance(m, nn.Linear | nn.Embedding))  # fmt: skip

    def set_masks(self, model: nn.Module, masks: dict[str, torch.Tensor]) -> None:
        params = dict(model.named_parameters())
        self.masks = {k: v.bool().cpu() for k, v in masks.items()}
        self._local = {}
        for name, mask in self.masks.items():
            if name not in params:
                raise ConfigError(f"pruning mask for {name}, which the model does not have")
            p = params[name]
            if tuple(mask.shape) != tuple(p.shape):
                raise ConfigError(
                    f"pruning mask {name} has shape {tuple(mask.shape)}, the weight {tuple(p.shape)}"
                )
            m = mask.to(dtype=p.dtype)
            if isinstance(p, DTensor):
                m = distribute_tensor(
                    m.to(p.to_local().device), p.device_mesh, p.placements, src_data_rank=None
                )
            else:
                m = m.to(p.device)
            self._local[name] = m
        self.apply_masks(model)

    # -- in the loop ------------------------------------------------------------------------------
    def before_step(self, model: nn.Module, step: int) -> None:
        if self.scheme != "none":
            on = step >= self.from_step
            for fq in _fake_quantizers(model):
                fq.enabled = on

    @torch.no_grad()
    def apply_masks(self, model: nn.Module) -> None:
        if not self._local:
            return
        params = dict(model.named_parameters())
        for name, m in self._local.items():
            params[name].mul_(m)

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"masks": self.masks}

    def load_state_dict(self, model: nn.Module, state: dict[str, Any] | None) -> None:
        if state and state.get("masks"):
            self.set_masks(model, state["masks"])
