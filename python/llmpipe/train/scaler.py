"""The fp16 loss scaler, for sharded and tensor-parallel gradients.

The loss is multiplied by ``scale`` before backward so small fp16 gradients do not flush to zero. After
backward every rank checks its own gradient shards for inf / NaN and the verdict is all-reduced (MAX), so
every rank skips the same step: on overflow the step is skipped and counted and the scale halves; after
``growth_interval`` clean steps it doubles. Otherwise the gradients are divided by the scale in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


class LossScaler:
    def __init__(self, enabled: bool, init_scale: float = 65536.0, growth_interval: int = 200) -> None:
        self.enabled = enabled
        self.scale = init_scale if enabled else 1.0
        self.growth_interval = growth_interval
        self.clean_steps = 0
        self.skipped = 0  # overflow steps skipped so far

    def unscale_(self, params: Sequence[torch.Tensor], device: torch.device) -> bool:
        """Divide the gradients by the scale; False (and the scale halved) when any rank overflowed."""
        if not self.enabled:
            return True
        grads = [g.to_local() if isinstance(g, DTensor) else g for p in params if (g := p.grad) is not None]
        found = torch.zeros(1, device=device)
        for g in grads:
            found = torch.maximum(found, (~torch.isfinite(g)).any().float().reshape(1).to(device))
        if dist.is_initialized():
            dist.all_reduce(found, op=dist.ReduceOp.MAX)
        if float(found) > 0:
            self.scale /= 2.0
            self.clean_steps = 0
            self.skipped += 1
            return False
        torch._foreach_mul_(grads, 1.0 / self.scale)
        self.clean_steps += 1
        if self.clean_steps >= self.growth_interval:
            self.scale *= 2.0
            self.clean_steps = 0
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "clean_steps": self.clean_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale, self.clean_steps, self.skipped = state["scale"], state["clean_steps"], state["skipped"]
