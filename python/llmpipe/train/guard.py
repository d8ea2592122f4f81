"""Loss-spike guard: skip a batch whose loss jumps above k x the running average; after repeated
spikes, ask for a rollback to the last checkpoint. It is fed the loss averaged over all ranks, so every
rank takes the same decision without further communication."""

from __future__ import annotations

import math
from typing import Any, Literal

from llmpipe.errors import LlmpipeError
from llmpipe.train.config import GuardConfig

Decision = Literal["ok", "skip", "rollback"]


class TrainingDiverged(LlmpipeError):
    """Rollbacks did not get the run past its bad steps (``guard.max_rollbacks``): stop, exit code 3."""

    exit_code = 3


class SpikeGuard:
    def __init__(self, cfg: GuardConfig) -> None:
        self.cfg = cfg
        self.avg: float | None = None
        self.seen = 0  # accepted losses
        self.consecutive = 0  # spikes in a row
        self.total_spikes = 0

    def check(self, loss: float, grad_norm: float = 0.0) -> Decision:
        """A step is bad when its loss or its gradient norm is not finite (always), or when its loss
        jumps above factor x the running average (when enabled)."""
        broken = not math.isfinite(loss) or not math.isfinite(grad_norm)
        spike = broken
        if not spike and self.cfg.enabled and self.avg is not None and self.seen >= self.cfg.warmup:
            spike = loss > self.cfg.factor * self.avg
        if spike and (self.cfg.enabled or broken):
            self.consecutive += 1
            self.total_spikes += 1
            return "rollback" if self.consecutive >= self.cfg.max_spikes else "skip"
        self.consecutive = 0
        self.seen += 1
        a = self.cfg.ema
        self.avg = loss if self.avg is None else a * self.avg + (1 - a) * loss
        return "ok"

    def state_dict(self) -> dict[str, Any]:
        return {
            "avg": self.avg,
            "seen": self.seen,
            "consecutive": self.consecutive,
            "total": self.total_spikes,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.avg, self.seen = state["avg"], state["seen"]
        self.consecutive, self.total_spikes = state["consecutive"], state["total"]
