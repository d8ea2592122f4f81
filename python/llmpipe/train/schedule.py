"""The global batch per optimizer step: a constant number of micro-batches, or a ramp up to it.

A micro-batch is ``data.batch_size`` sequences on every rank (``G = batch_size * world_size`` samples).
Step ``s`` takes ``accum(s)`` consecutive micro-batches of the loader, so a ramp changes only how the one
sample stream is grouped into steps: nothing is repeated or skipped when the batch grows.

Ramp (``train.ramp_tokens > 0``): micro-batches per step start at ``train.ramp_start`` and double until
``train.grad_accum``; with ``k`` doublings, phase ``i < k`` lasts until ``(i + 1) * ramp_tokens / k``
tokens (``samples * seq_len``) have been consumed, then the full batch holds. The learning rate follows
the batch (``optim.batch_lr``): ``sqrt`` scales the schedule's rate by ``sqrt(batch / full batch)`` (the
square-root rule for Adam, as OLMo-core's batch-size scheduler does), ``linear`` by ``batch / full``,
``none`` leaves it.
"""

from __future__ import annotations

import math
from bisect import bisect_right

from llmpipe.errors import ConfigError


class BatchSchedule:
    def __init__(self, micro_global: int, seq_len: int, grad_accum: int, ramp_start: int, ramp_tokens: int):
        self.micro_global = micro_global
        self.grad_accum = grad_accum
        # phases: (first step, micro-batches per step, samples consumed before the first step)
        self._starts: list[int] = [0]
        self._accum: list[int] = [grad_accum]
        self._samples: list[int] = [0]
        if ramp_tokens <= 0 or ramp_start >= grad_accum:
            return
        ratio = grad_accum // ramp_start
        if ramp_start < 1 or grad_accum % ramp_start or ratio & (ratio - 1):
            raise ConfigError(
                f"train.ramp_start={ramp_start}: train.grad_accum={grad_accum} must be it times a power of 2"
            )
        k = ratio.bit_length() - 1
        self._starts, self._accum, self._samples = [], [], []
        step, samples = 0, 0
        for i in range(k):
            accum = ramp_start << i
            per_step = accum * micro_global
            until = math.ceil((i + 1) * ramp_tokens / k / seq_len)  # samples at the end of the phase
            n = max(0, math.ceil((until - samples) / per_step))
            if n:
                self._starts.append(step)
                self._accum.append(accum)
                self._samples.append(samples)
                step, samples = step + n, samples + n * per_step
        self._starts.append(step)
        self._accum.append(grad_accum)
        self._samples.append(samples)

    @property
    def ramped(self) -> bool:
        return len(self._accum) > 1

    def accum(self, step: int) -> int:
        """Micro-batches of optimizer step ``step`` (0-based)."""
        return self._accum[bisect_right(self._starts, step) - 1]

    def samples_before(self, step: int) -> int:
        """Global samples consumed by steps ``0 .. step - 1``."""
        i = bisect_right(self._starts, step) - 1
        return self._samples[i] + (step - self._starts[i]) * self._accum[i] * self.micro_global

    def lr_scale(self, step: int, rule: str) -> float:
        frac = self.accum(step) / self.grad_accum
        if rule == "sqrt":
            return math.sqrt(frac)
        if rule == "linear":
            return frac
        return 1.0
