"""ZeRO stages by name (``parallel.zero``): what is sharded over the ``dp_shard`` ranks.

    stage  parameters   gradients            optimizer states   how
    1      replicated   replicated (all-     sharded            no FSDP: each gradient all-reduced as it is
                        reduced)                                produced; ShardedAdamW below
    2      gathered in  sharded (reduce-     sharded            FSDP2, ``reshard_after_forward=False``
           forward, kept scatter)                               (FSDP1's SHARD_GRAD_OP)
           to backward
    3      sharded      sharded              sharded            FSDP2 (``sharding: full``, today's default)

``parallel.zero: 0`` (the default) leaves the stage to ``sharding`` (``full`` / ``hybrid``: 3 over the
``dp_shard`` ranks; ``none``: nothing sharded). With a stage, ``sharding`` still sizes the mesh: ``full``
shards over every data-parallel rank, ``hybrid`` within groups of ``shard_size`` ranks, replicated across
them. ``sharding: none``, or a layout with ``dp_shard`` = 1 on several data-parallel ranks, has nothing to
shard over: one ConfigError line.

Stage 1 keeps every parameter's AdamW moments only for the rows this rank owns: the ``torch.chunk`` of
dim 0 that FSDP2 and DTensor's ``Shard(0)`` give it. The moments are DTensors (``Shard(0)`` on the
data-parallel mesh, ``Replicate`` over a replicate dimension), keyed by the model's parameters, so
``get_state_dict`` names them by parameter and a DCP checkpoint holds exactly what an FSDP2 (stage 2 or 3)
run writes: it resumes at any stage, world size or layout, and theirs at stage 1. torch's
``ZeroRedundancyOptimizer`` was not used: its ``state_dict`` must first be consolidated on one rank (the
whole optimizer state in one process) and indexes states by its own parameter partition, which neither
DCP's resharding nor ``get_state_dict`` understands.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.optim.adamw import adamw

from llmpipe.errors import ConfigError
from llmpipe.train.config import ParallelConfig

if TYPE_CHECKING:
    from llmpipe.train.parallel import Dist


def check_layout(cfg: ParallelConfig, dp_replicate: int, dp_shard: int) -> None:
    """One ConfigError line for a stage that contradicts the other parallel keys."""
    z = cfg.zero
    if not z:
        return
    if cfg.sharding == "none":
        raise ConfigError(
            f"parallel.zero={z} shards over the data-parallel ranks but parallel.sharding=none replicates "
            "everything: set one of them"
        )
    if dp_shard == 1 and dp_replicate > 1:
        raise ConfigError(
            f"parallel.zero={z} shards over the dp_shard ranks, but this layout has dp_shard 1 "
            f"(dp_replicate {dp_replicate}): raise parallel.dp_shard"
        )
    if z < 3 and cfg.cpu_offload:
        raise ConfigError(f"parallel.cpu_offload is FSDP's ZeRO-3 offload: it runs with zero=3, not zero={z}")
    if z == 1 and (cfg.tp > 1 or cfg.pp > 1 or cfg.cp > 1):
        raise ConfigError(
            "parallel.zero=1 runs with tp=1, pp=1 and cp=1 (zero=2 and zero=3 compose with them)"
        )


def stage(cfg: ParallelConfig, dp: int) -> int:
    """The ZeRO stage this run trains at: 0 when nothing is sharded (one data-parallel rank, or
    ``sharding: none`` without a stage)."""
    if dp == 1:
        return 0
    if cfg.zero:
        return cfg.zero
    return 0 if cfg.sharding == "none" else 3


def _groups(mesh: DeviceMesh) -> list[dist.ProcessGroup]:
    return [mesh.get_group(i) for i in range(mesh.ndim)]


def replicate_gradients(model: nn.Module, d: Dist) -> None:
    """Stage 1: average every trainable parameter's gradient over all data-parallel ranks as autograd
    produces it (each micro-batch's, as FSDP2 reduces each micro-batch), so every rank holds the
    same, whole gradient for clipping and the optimizer. Divides before summing, as FSDP2 does on gloo."""
    groups, n = _groups(d.dp_mesh), d.dp_size

    def reduce(g: torch.Tensor) -> torch.Tensor:
        g = g / n  # a new tensor: the incoming one may be shared with another branch of the graph
        for group in groups:
            dist.all_reduce(g, group=group)
        return g

    for p in model.parameters():
        if p.requires_grad:
            p.register_hook(reduce)


class ShardedAdamW(torch.optim.AdamW):
    """AdamW over whole (replicated) parameters whose moments cover only this rank's dim-0 chunk of
    each: the step updates those rows in place (torch's AdamW kernel on the chunks), then the chunks are
    all-gathered over the shard dimension (the mesh's last) so every rank holds the whole update.

    Parameter groups, the learning-rate scheduler, ``zero_grad`` and ``state_dict`` are torch's; the
    states are DTensors, so DCP saves and reshards them as FSDP2's."""

    def __init__(self, params: Iterable[Any], mesh: DeviceMesh, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.mesh = mesh
        self.placements = [Replicate()] * (mesh.ndim - 1) + [Shard(0)]
        self.shard_group = mesh.get_group(mesh.ndim - 1)
        self.n_shards = mesh.size(mesh.ndim - 1)

    def _rows(self, p: torch.Tensor) -> tuple[int, int]:
        shape, offset = compute_local_shape_and_global_offset(p.shape, self.mesh, self.placements)
        return offset[0], offset[0] + shape[0]

    def _moment(self, p: torch.Tensor) -> DTensor:
        lo, hi = self._rows(p)
        local = torch.zeros((hi - lo, *p.shape[1:]), dtype=p.dtype, device=p.device)
        return DTensor.from_local(
            local, self.mesh, self.placements, run_check=False, shape=p.shape, stride=p.stride()
        )

    def _init_state(self, group: dict[str, Any], p: torch.Tensor) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            on_device = group["capturable"] or group["fused"]
            state["step"] = (
                torch.zeros((), dtype=torch.float32, device=p.device) if on_device else torch.tensor(0.0)
            )
            state["exp_avg"] = self._moment(p)
            state["exp_avg_sq"] = self._moment(p)
        return state

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise ValueError("ShardedAdamW takes no closure")
        updated: list[torch.Tensor] = []
        for group in self.param_groups:
            if group["amsgrad"]:
                raise ValueError("ShardedAdamW does not implement amsgrad")
            ps, gs, ms, vs, steps = [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._init_state(group, p)
                updated.append(p)
                lo, hi = self._rows(p)
                if hi == lo:  # more shards than rows: nothing here, but the step count stays in step
                    state["step"] += 1
                    continue
                ps.append(p.detach()[lo:hi])  # views: the kernel updates this rank's rows of p in place
                gs.append(p.grad[lo:hi])
                ms.append(state["exp_avg"].to_local())
                vs.append(state["exp_avg_sq"].to_local())
                steps.append(state["step"])
            if ps:
                adamw(
                    ps, gs, ms, vs, [], steps,
                    foreach=group["foreach"], capturable=group["capturable"], fused=group["fused"],
                    amsgrad=False, beta1=group["betas"][0], beta2=group["betas"][1], lr=group["lr"],
                    weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                )  # fmt: skip
        for p in updated:
            self._gather(p)

    def _gather(self, p: torch.Tensor) -> None:
        """Every rank's updated rows into every rank's ``p`` (torch.chunk rows: the last chunks may be
        shorter or empty, so uneven parameters go through a padded buffer)."""
        n, rows = self.n_shards, p.shape[0]
        per = -(-rows // n)
        lo, hi = self._rows(p)
        full = p.detach()
        mine = torch.zeros((per, *p.shape[1:]), dtype=p.dtype, device=p.device)
        mine[: hi - lo] = full[lo:hi]
        if per * n == rows and full.is_contiguous():
            dist.all_gather_into_tensor(full, mine, group=self.shard_group)
            return
        out = torch.empty((per * n, *p.shape[1:]), dtype=p.dtype, device=p.device)
        dist.all_gather_into_tensor(out, mine, group=self.shard_group)
        full.copy_(out[:rows])


def optimizer_mesh(cfg: ParallelConfig, d: Dist) -> DeviceMesh | None:
    """The mesh stage 1 shards the optimizer states over (None: a plain optimizer)."""
    return d.dp_mesh if stage(cfg, d.dp_size) == 1 else None
