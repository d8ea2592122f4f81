"""Mixture of experts: token-choice top-k routing, grouped expert matmuls, expert parallelism.

``model.moe.experts: E`` turns the feed-forward layer of the chosen blocks (``model.moe.layers``, default
all) into ``MoE``: a softmax router picks ``top_k`` experts per token and their weights are renormalised
over the chosen ones (Mixtral's and Qwen2-MoE's ``norm_topk_prob`` routing, so export is a renaming); the
experts are SwiGLUs stored stacked (``w1``/``w3`` [E, hidden, dim], ``w2`` [E, dim, hidden]) and run as
one grouped matmul (``torch._grouped_mm``) or, where that is missing, a loop over the experts (the same
products, row for row). ``shared_experts: S`` adds one always-on SwiGLU of S x the expert width behind a
sigmoid gate (Qwen2-MoE's shared expert).

Balancing: ``aux_loss`` adds the Switch/Mixtral load-balancing loss (E * sum_e f_e P_e per sequence,
1 when balanced) times ``aux_loss_coef``; ``bias`` is DeepSeek-V3's auxiliary-loss-free balancing (a
per-expert bias added to the scores for the choice only, moved by ``bias_update_rate`` toward the mean
load after each optimizer step). ``capacity_factor`` c > 0 caps each expert at ceil(c * L * K / E)
assignments per sequence of L tokens (later tokens of the sequence are dropped: they pass on the
residual only); 0 is dropless. Every statistic is per sequence, so losses do not depend on the layout.

Expert parallelism (``parallel.ep: N``) splits the experts over N ranks carved out of ``dp_shard``
(consecutive ranks form one ep group; with ``dp_shard = N x M`` there are M groups). Each rank sorts
its tokens' assignments by expert, sends each to the expert's rank with ``all_to_all_single`` (gloo
and NCCL both have it), runs its experts, and sends the results back. Expert weights are DTensors
sharded on dim 0 over the ep group (checkpoints reshard to any other ep); FSDP leaves them alone and
shards the rest of the model as usual. Their gradients are scaled by 1 / dp (each rank's loss is
already scaled for FSDP's mean) and summed over the M replicas of each expert shard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor


@dataclass
class MoEConfig:
    experts: int = 0  # routed experts per MoE layer; 0: a dense model
    top_k: int = 2  # experts per token
    shared_experts: int = 0  # always-on experts (one SwiGLU of shared_experts x expert_hidden, gated)
    expert_hidden: int | None = None  # each expert's SwiGLU width; None: the model's ffn hidden
    layers: list[int] | None = None  # the blocks that are MoE (0-based); None: all
    capacity_factor: float = 0.0  # > 0: at most ceil(c * L * top_k / experts) tokens per expert and sequence
    balance: Literal["aux_loss", "bias", "none"] = "aux_loss"
    aux_loss_coef: float = 0.01  # balance=aux_loss: weight of the load-balancing loss
    bias_update_rate: float = 1e-3  # balance=bias: the bias step per optimizer step (DeepSeek-V3's gamma)

    def __post_init__(self) -> None:
        if self.experts < 0 or self.shared_experts < 0:
            raise ValueError("moe.experts and moe.shared_experts must be >= 0")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise ValueError(f"moe.top_k {self.top_k} must be in [1, moe.experts {self.experts}]")
        if self.capacity_factor < 0 or self.aux_loss_coef < 0 or self.bias_update_rate < 0:
            raise ValueError("moe.capacity_factor, aux_loss_coef and bias_update_rate must be >= 0")
        if self.expert_hidden is not None and self.expert_hidden < 1:
            raise ValueError("moe.expert_hidden must be positive")

    def is_moe(self, layer: int) -> bool:
        return self.experts > 0 and (self.layers is None or layer in self.layers)


# -- the expert computation ----------------------------------------------------------------------------
def grouped_mm_supported(x: torch.Tensor) -> bool:
    """torch._grouped_mm runs here: CPU (any float), or CUDA compute capability 9.0+ in bf16."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if x.device.type == "cpu":
        return x.dtype in (torch.float32, torch.bfloat16)
    if x.device.type == "cuda":
        return x.dtype == torch.bfloat16 and torch.cuda.get_device_capability(x.device) >= (9, 0)
    return False


def expert_ffn(
    x: torch.Tensor,
    counts: list[int],
    w1: torch.Tensor,
    w3: torch.Tensor,
    w2: torch.Tensor,
    grouped: bool | None = None,
) -> torch.Tensor:
    """SwiGLU of each expert on its rows: ``x`` [N, dim] holds counts[e] rows for expert e, in order.
    ``grouped``: torch._grouped_mm (None: where supported), else one matmul per expert."""
    if grouped is None:
        grouped = grouped_mm_supported(x)
    if grouped:
        offs = torch.tensor(counts, device=x.device).cumsum(0).to(torch.int32)
        h = F.silu(torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs))
        h = h * torch._grouped_mm(x, w3.transpose(-2, -1), offs=offs)
        return torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)
    outs = [
        F.linear(F.silu(F.linear(xe, w1[e])) * F.linear(xe, w3[e]), w2[e])
        for e, xe in enumerate(x.split(counts))
    ]
    return torch.cat(outs) if outs else x.new_zeros(0, w2.shape[1])


class _AllToAll(torch.autograd.Function):
    """all_to_all_single of rows, differentiable: the backward sends the gradients the way back."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: dist.ProcessGroup
    ) -> torch.Tensor:
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty(sum(out_splits), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        out_splits, in_splits = ctx.splits
        back = grad.new_empty(sum(in_splits), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


class _ExpertGrad(torch.autograd.Function):
    """Identity forward; backward scales an expert shard's gradient by ``scale`` (1 / dp: the loss is
    scaled for FSDP's mean, which these weights skip) and sums it over the shard's replicas."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, w: torch.Tensor, scale: float, group: dist.ProcessGroup | None
    ) -> torch.Tensor:
        ctx.scale, ctx.group = scale, group
        return w.view_as(w)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        g = grad * ctx.scale
        if ctx.group is not None:
            dist.all_reduce(g, group=ctx.group)
        return g, None, None


@dataclass
class ExpertParallel:
    """How one MoE layer's experts are spread: this rank holds experts [rank * local, (rank + 1) * local)."""

    group: dist.ProcessGroup
    size: int
    rank: int
    grad_scale: float  # 1 / dp
    replicas: dist.ProcessGroup | None  # the other ranks holding the same experts (None: no others)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


@dataclass
class RoutingStats:
    """What one MoE layer routed since the last read (training forward passes only)."""

    load: torch.Tensor | None = None  # [E] assignments per expert (before capacity drops)
    step_load: torch.Tensor | None = None  # [E] this optimizer step's (bias balancing)
    dropped: float | torch.Tensor = 0.0  # assignments over capacity
    assigned: float = 0.0  # all assignments
    aux_sum: float | torch.Tensor = 0.0  # the balance loss summed over sequences
    sequences: float = 0.0


class MoE(nn.Module):
    """The routed (and shared) experts of one block, in place of its feed-forward layer."""

    expert_bias: torch.Tensor

    def __init__(self, dim: int, hidden: int, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg, self.dim = cfg, dim
        e = cfg.experts
        self.router = nn.Linear(dim, e, bias=False)
        self.w1 = nn.Parameter(torch.empty(e, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(e, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(e, dim, hidden))
        self.shared: SwiGLU | None = None
        self.shared_gate: nn.Linear | None = None
        if cfg.shared_experts:
            self.shared = SwiGLU(dim, cfg.shared_experts * hidden)
            self.shared_gate = nn.Linear(dim, 1, bias=False)
        if cfg.balance == "bias":  # part of the model's state: checkpointed, so a resume is exact
            self.register_buffer("expert_bias", torch.zeros(e, dtype=torch.float32))
        self.ep: ExpertParallel | None = None
        self.grouped: bool | None = None  # None: torch._grouped_mm where supported (expert_ffn)
        self.stats = RoutingStats()
        self.aux: torch.Tensor | None = None  # the last training forward's balance loss (sum over sequences)

    # -- routing ---------------------------------------------------------------------------------------
    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, L, dim] -> chosen experts [B, L, K], their weights [B, L, K] (fp32), router probs [B, L, E]."""
        probs = self.router(x).float().softmax(-1)
        scores = probs + self.expert_bias if self.cfg.balance == "bias" else probs
        idx = scores.topk(self.cfg.top_k, dim=-1).indices
        w = probs.gather(-1, idx)
        return idx, w / w.sum(-1, keepdim=True), probs

    def capacity_mask(self, idx: torch.Tensor) -> torch.Tensor | None:
        """[B, L*K] True for the assignments within each expert's capacity in their sequence; None: dropless."""
        if not self.cfg.capacity_factor:
            return None
        b, n, k = idx.shape
        cap = math.ceil(self.cfg.capacity_factor * n * k / self.cfg.experts)
        onehot = F.one_hot(idx.reshape(b, n * k), self.cfg.experts)
        position = (onehot.cumsum(1) * onehot).sum(-1)  # 1-based rank of each assignment at its expert
        return position <= cap

    def balance_loss(self, idx: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """Per sequence E * sum_e f_e P_e (f: share of the sequence's assignments, P: mean router prob),
        summed over the sequences."""
        b, n, k = idx.shape
        f = F.one_hot(idx.reshape(b, n * k), self.cfg.experts).float().mean(1)  # [B, E]
        return self.cfg.experts * (f * probs.mean(1)).sum()

    # -- forward ----------------------------------------------------------------------------------------
    @torch.compiler.disable  # data-dependent shapes and collectives: eager under parallel.compile
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, dim = x.shape
        k, e = self.cfg.top_k, self.cfg.experts
        idx, weights, probs = self.route(x)
        keep = self.capacity_mask(idx) if self.training else None  # evaluation is dropless, as HF
        flat_e, flat_w = idx.reshape(-1), weights.reshape(-1)
        tok = torch.arange(b * n, device=x.device).repeat_interleave(k)
        if self.training and self.cfg.balance == "aux_loss":
            aux = self.balance_loss(idx, probs)  # also when recomputed: the same tensors saved
        # activation checkpointing re-runs this forward inside the backward: count and keep the loss once
        if self.training and torch._C._current_graph_task_id() == -1:
            self._count(idx, keep)
            if self.cfg.balance == "aux_loss":
                self.aux = aux
                self.stats.aux_sum = self.stats.aux_sum + aux.detach()
        if keep is not None:
            kept = keep.reshape(-1)
            flat_e, flat_w, tok = flat_e[kept], flat_w[kept], tok[kept]
        order = flat_e.argsort(stable=True)
        tok, flat_w = tok[order], flat_w[order]
        counts = torch.bincount(flat_e, minlength=e)
        xs = x.reshape(-1, dim)
        ys = self.experts(xs[tok], counts)
        out = torch.zeros_like(xs).index_add_(0, tok, ys * flat_w[:, None].to(ys.dtype))
        if self.shared is not None and self.shared_gate is not None:
            out = out + torch.sigmoid(self.shared_gate(xs)) * self.shared(xs)
        return out.view(b, n, dim)

    def _weights(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ws = []
        for p in (self.w1, self.w3, self.w2):
            w = p.to_local() if isinstance(p, DTensor) else p
            if self.ep is not None:
                w = _ExpertGrad.apply(w, self.ep.grad_scale, self.ep.replicas)
            ws.append(w.to(dtype))
        return ws[0], ws[1], ws[2]

    def experts(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Rows ``xs`` sorted by expert (counts[e] for expert e) through their experts."""
        w1, w3, w2 = self._weights(xs.dtype)
        if self.ep is None:
            return self._ffn(xs, counts.tolist(), w1, w3, w2)
        ep, local = self.ep, self.cfg.experts // self.ep.size
        recv = torch.empty_like(counts)  # recv[src * local + j]: rows rank src sends for my expert j
        dist.all_to_all_single(recv, counts, group=ep.group)
        send_splits = counts.view(ep.size, local).sum(1).tolist()
        recv_counts = recv.view(ep.size, local)
        recv_splits = recv_counts.sum(1).tolist()
        xr = _AllToAll.apply(xs, recv_splits, send_splits, ep.group)
        # rows arrive by source rank, then expert: group them by expert for the matmuls
        expert_of = torch.arange(local, device=xs.device).repeat(ep.size)
        perm = expert_of.repeat_interleave(recv_counts.reshape(-1)).argsort(stable=True)
        y = self._ffn(xr[perm], recv_counts.sum(0).tolist(), w1, w3, w2)
        back = torch.empty_like(y).index_copy(0, perm, y)
        return _AllToAll.apply(back, send_splits, recv_splits, ep.group)

    def _ffn(
        self, x: torch.Tensor, counts: list[int], w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor
    ) -> torch.Tensor:
        """expert_ffn; a grouped matmul the device refuses (shapes, alignment) falls back to the loop."""
        if self.grouped is None and grouped_mm_supported(x):
            try:
                return expert_ffn(x, counts, w1, w3, w2, grouped=True)
            except RuntimeError:
                self.grouped = False
        return expert_ffn(x, counts, w1, w3, w2, grouped=bool(self.grouped))

    @torch.no_grad()
    def _count(self, idx: torch.Tensor, keep: torch.Tensor | None) -> None:
        s = self.stats
        load = torch.bincount(idx.reshape(-1), minlength=self.cfg.experts).double()
        s.load = load if s.load is None else s.load + load
        s.step_load = load if s.step_load is None else s.step_load + load
        s.assigned += idx.numel()
        s.sequences += idx.shape[0]
        if keep is not None:
            s.dropped = s.dropped + (~keep).sum()


# -- the model's MoE layers ----------------------------------------------------------------------------
def moe_layers(model: nn.Module) -> list[tuple[str, MoE]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, MoE)]


def inactive_params(model: nn.Module) -> int:
    """Routed expert weights a token does not use: (experts - top_k) of each MoE layer's."""
    return sum(
        (m.cfg.experts - m.cfg.top_k) * (m.w1[0].numel() * 2 + m.w2[0].numel()) for _, m in moe_layers(model)
    )


def check_layout(cfg: MoEConfig, n_layers: int, ep: int, tp: int, pp: int, dp_shard: int) -> str | None:
    """Why this model and layout cannot run, or None."""
    if ep < 1:
        return "parallel.ep must be >= 1"
    if not cfg.experts:
        return "parallel.ep > 1 needs model.moe.experts" if ep > 1 else None
    if cfg.layers is not None and any(not 0 <= i < n_layers for i in cfg.layers):
        return f"model.moe.layers {cfg.layers}: each must be a block index in [0, {n_layers})"
    if tp > 1 or pp > 1:  # tp here: tp x cp
        return "model.moe runs with parallel.tp=1, pp=1 and cp=1 (experts are split by parallel.ep)"
    if cfg.experts % ep:
        return f"parallel.ep {ep} must divide model.moe.experts {cfg.experts}"
    if dp_shard % ep:
        return f"parallel.ep {ep} must divide parallel.dp_shard {dp_shard} (ep ranks are taken from dp_shard)"
    return None


def apply_ep(model: nn.Module, ep: int, world: int, device_type: str) -> DeviceMesh | None:
    """Shard every MoE layer's experts over ``ep`` consecutive ranks (before FSDP; the model on meta).
    Returns the (replicas x ep) mesh, or None when ep is 1."""
    if ep == 1 or not moe_layers(model):
        return None
    mesh = init_device_mesh(device_type, (world // ep, ep), mesh_dim_names=("ep_replicas", "ep"))
    replicas = mesh["ep_replicas"].get_group() if world // ep > 1 else None
    for _, m in moe_layers(model):
        for name in ("w1", "w3", "w2"):
            p = getattr(m, name)
            setattr(m, name, nn.Parameter(distribute_tensor(p, mesh["ep"], [Shard(0)], src_data_rank=None)))
        m.ep = ExpertParallel(mesh["ep"].get_group(), ep, mesh.get_local_rank("ep"), 1.0 / world, replicas)
    return mesh


def expert_params(module: nn.Module) -> set[nn.Parameter]:
    """The expert-parallel weights under ``module``: FSDP must leave them to ``apply_ep``'s sharding."""
    return {p for _, m in moe_layers(module) if m.ep is not None for p in (m.w1, m.w3, m.w2)}


def aux_loss(model: nn.Module) -> torch.Tensor | None:
    """The last training forward's balance loss: the mean over MoE layers of the per-sequence losses,
    summed over this rank's sequences (times aux_loss_coef). None without aux_loss balancing."""
    layers = [m for _, m in moe_layers(model) if m.aux is not None]
    if not layers:
        return None
    total = torch.stack([m.aux for m in layers if m.aux is not None]).sum()
    for m in layers:
        m.aux = None
    return total * (layers[0].cfg.aux_loss_coef / len(layers))


class RoutingMonitor:
    """Routing statistics for the metrics (all ranks' tokens) and bias balancing after each step."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.layers = moe_layers(model)
        self.device = device

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        if dist.is_initialized():
            dist.all_reduce(t)
        return t

    @torch.no_grad()
    def after_step(self, apply: bool = True) -> None:
        """balance=bias: each expert's bias moves by the update rate toward the mean load of the step
        (``apply`` False: a skipped step, whose loads are discarded)."""
        for _, m in self.layers:
            load, m.stats.step_load = m.stats.step_load, None
            if m.cfg.balance != "bias" or load is None or not apply:
                continue
            load = self._reduce(load.to(self.device))
            m.expert_bias += m.cfg.bias_update_rate * torch.sign(load.mean() - load).float()

    @torch.no_grad()
    def record(self) -> dict[str, Any]:
        """Since the last record: assignments per expert per MoE layer, the load imbalance (max / mean,
        the worst layer), the share of assignments dropped over capacity, the mean balance loss."""
        e = self.layers[0][1].cfg.experts
        loads = torch.zeros(len(self.layers), e, dtype=torch.float64, device=self.device)
        sums = torch.zeros(len(self.layers), 4, dtype=torch.float64, device=self.device)
        for i, (_, m) in enumerate(self.layers):
            s = m.stats
            if s.load is not None:
                loads[i] = s.load
            for j, v in enumerate((s.dropped, s.assigned, s.aux_sum, s.sequences)):
                sums[i, j] = v
            m.stats = RoutingStats()
        loads, sums = self._reduce(loads), self._reduce(sums)
        if float(sums[:, 1].sum()) == 0:
            return {}
        mean = loads.mean(1).clamp(min=1e-9)
        rec: dict[str, Any] = {
            "moe_tokens_per_expert": [[int(v) for v in row] for row in loads.tolist()],
            "moe_imbalance": float((loads.max(1).values / mean).max()),
            "moe_dropped_frac": float(sums[:, 0].sum() / sums[:, 1].sum()),
        }
        if self.layers[0][1].cfg.balance == "aux_loss":
            rec["moe_aux_loss"] = float((sums[:, 2] / sums[:, 3].clamp(min=1)).mean())
        if self.layers[0][1].cfg.balance == "bias":
            rec["moe_bias_absmax"] = max(float(m.expert_bias.abs().max()) for _, m in self.layers)
        return rec
