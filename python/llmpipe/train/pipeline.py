"""Pipeline parallel: the model split into stages of whole blocks, run by a torch.distributed.pipelining
schedule (``gpipe``, ``1f1b``, or ``interleaved_1f1b`` with several stages per rank).

Each rank of a pipeline group reads the same batch as the others of its data-parallel replica; the
schedule splits it into ``parallel.pp_microbatches`` micro-batches along the batch. The loss is the
summed cross entropy times the step's normaliser (data-parallel size / global target tokens), so the
gradients equal the unsplit model's (``scale_grads=False``: no division by the micro-batch count).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    PipelineScheduleMulti,
    PipelineScheduleSingle,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)
from torch.distributed.pipelining.stage import _PipelineStageBase

from llmpipe.data import Batch
from llmpipe.train.config import RunConfig
from llmpipe.train.model import Transformer, rope_tables
from llmpipe.train.parallel import Dist, Stage, StageParts, microbatches, parallelize, stage_ids
from llmpipe.train.pp_math import split_layers


class Pipeline:
    def __init__(self, cfg: RunConfig, d: Dist, model: Transformer) -> None:
        """Split the meta-device ``model``, parallelise and materialise this rank's stages, and fill
        them with the weights the whole model would have (``init_weights(only=...)``)."""
        p = cfg.parallel
        n_stages = p.pp * len(stage_ids(p, 0))
        split = split_layers(cfg.model.n_layers, n_stages)
        ids = stage_ids(p, d.pp_rank)
        self.stages = [Stage(model, split[s], s == 0, s == n_stages - 1) for s in ids]
        for st in self.stages:
            parallelize(st, p, d)
        self.parts = StageParts(self.stages)
        for st in self.stages:
            st.to_empty(device=d.device)
            st.rope = rope_tables(
                cfg.model.head_dim, cfg.model.max_seq_len or 0, cfg.model.rope_theta, d.device
            )
        model.init_weights(seed=cfg.train.seed, only=dict(self.parts.named_parameters()))
        group = d.mesh["pp"].get_group()
        self.pipe_stages = [
            PipelineStage(st, s, n_stages, d.device, group=group)
            for st, s in zip(self.stages, ids, strict=True)
        ]
        self.has_first = 0 in ids
        self.has_last = n_stages - 1 in ids
        self.n_micro = microbatches(p)
        self._norm: torch.Tensor = torch.ones(())
        self._scale = 1.0
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = self._loss
        self.schedule: PipelineScheduleSingle | PipelineScheduleMulti
        if p.pp_schedule == "interleaved_1f1b":
            stages: list[_PipelineStageBase] = list(self.pipe_stages)
            self.schedule = ScheduleInterleaved1F1B(stages, self.n_micro, loss_fn=loss_fn, scale_grads=False)
        else:
            cls = ScheduleGPipe if p.pp_schedule == "gpipe" else Schedule1F1B
            self.schedule = cls(self.pipe_stages[0], self.n_micro, loss_fn=loss_fn, scale_grads=False)

    def _loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        ce = F.cross_entropy(
            logits.flatten(0, 1), target.long().flatten(), ignore_index=-100, reduction="sum"
        )
        return ce * self._scale * self._norm.to(ce.device)

    def _run(self, b: Batch, train: bool) -> torch.Tensor:
        args = (b.input,) if self.has_first else ()
        kwargs: dict[str, Any] = {"doc_ids": b.doc_ids} if b.doc_ids is not None else {}
        target = b.target if self.has_last else None
        losses: list[torch.Tensor] = []  # one per micro-batch, on the last stage: loss_fn's values
        if train:
            self.schedule.step(*args, target=target, losses=losses, **kwargs)
        else:
            self.schedule.eval(*args, target=target, losses=losses, **kwargs)
        if not losses:
            return torch.zeros((), dtype=torch.float64)
        return torch.stack([x.detach().double() for x in losses]).sum() / self._norm.double().to(
            losses[0].device
        )

    def train_batches(
        self, batches: list[Batch], norm: torch.Tensor, scale: float = 1.0, grad_scale: float = 1.0
    ) -> torch.Tensor:
        """Forward and backward of every micro-batch; this rank's summed loss (zero off the last stage)."""
        self._norm, self._scale = norm * grad_scale, scale
        dev = batches[0].input.device
        return sum(
            (self._run(b, True).to(dev) for b in batches), torch.zeros((), dtype=torch.float64, device=dev)
        )

    @torch.no_grad()
    def eval_batch(self, b: Batch) -> float:
        self._norm, self._scale = torch.ones(()), 1.0
        for st in self.stages:
            st.eval()
        try:
            return float(self._run(b, False))
        finally:
            for st in self.stages:
                st.train()

    def modules(self) -> list[nn.Module]:
        return list(self.stages)
