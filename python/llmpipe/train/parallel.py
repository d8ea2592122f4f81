"""Process group, the N-D device mesh, and parallelising the model on it, in one place.

The mesh is ``pp x dp_replicate x dp_shard x cp x tp`` (names as in ``parallel.*``); the product of the
sizes is the world size. ``sharding`` keeps its meaning by filling the data-parallel sizes when neither is set:
``full``: ``dp_shard`` = every data-parallel rank (FSDP / ZeRO-3); ``hybrid``: ``dp_shard`` =
``shard_size`` (HSDP: sharded within a node, replicated across); ``none``: ``dp_replicate`` = every
data-parallel rank (DDP semantics). ``zero`` names the ZeRO stage over the ``dp_shard`` ranks (1: no
FSDP, train/zero.py; 2: FSDP2 keeping parameters gathered from forward to backward; 3: FSDP2); 0 leaves it
to ``sharding``. Tensor-parallel ranks see the same batch; pipeline ranks of one
data-parallel replica see the same batch too (the first stage reads the tokens, the last the targets).
Context-parallel ranks read the same batch and each keeps 1/cp of every row (train/context_parallel.py);
FSDP then shards and reduces over ``dp_shard x cp`` flattened, as a data-parallel dimension.

The model is parallelised in a fixed order, as in torchtitan: pipeline split (stages of whole blocks),
then tensor parallel (DTensor: column-wise Q/K/V and MLP up/gate, row-wise output and down, sequence
parallel for the norms, optionally loss parallel), then activation checkpointing and ``torch.compile`` of
each block, then FSDP2 over the data-parallel dimensions (each block its own group, then the stage
root). Mixed precision: bf16 or fp16 parameters in compute, fp32 gradient reduction, fp32 master weights.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

from llmpipe.errors import ConfigError
from llmpipe.train import encoder, pp_math, zero
from llmpipe.train.config import ParallelConfig
from llmpipe.train.context_parallel import ContextParallel
from llmpipe.train.model import Block, LayerRange, ModelConfig, Transformer
from llmpipe.train.moe import apply_ep, check_layout, expert_params

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass(frozen=True)
class Layout:
    pp: int
    dp_replicate: int
    dp_shard: int
    tp: int
    cp: int = 1

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def fsdp(self) -> int:
        """Ranks the parameters are sharded or replicated over and gradients reduced over: dp x cp."""
        return self.dp * self.cp

    @property
    def sizes(self) -> tuple[int, int, int, int, int]:
        return (self.pp, self.dp_replicate, self.dp_shard, self.cp, self.tp)

    def __str__(self) -> str:
        return " x ".join(f"{n} {s}" for n, s in zip(MESH_DIMS, self.sizes, strict=True))


def stages_per_rank(cfg: ParallelConfig) -> int:
    return pp_math.stages_per_rank(cfg.pp_schedule, cfg.pp_stages_per_rank)


def microbatches(cfg: ParallelConfig) -> int:
    return pp_math.n_microbatches(cfg.pp, stages_per_rank(cfg), cfg.pp_microbatches)


def resolve_layout(cfg: ParallelConfig, world: int, model: ModelConfig | None = None) -> Layout:
    """The mesh sizes for ``world`` ranks, or a one-line ConfigError saying what does not fit."""
    tp, pp, cp = cfg.tp, cfg.pp, cfg.cp
    if tp < 1 or pp < 1 or cp < 1 or cfg.dp_replicate < 0 or cfg.dp_shard < 0:
        raise ConfigError("parallel.tp, pp and cp must be >= 1, dp_replicate and dp_shard >= 0")
    if world % (tp * pp * cp):
        with_cp = f" x parallel.cp {cp}" if cp > 1 else ""
        raise ConfigError(
            f"parallel.tp {tp} x parallel.pp {pp}{with_cp} does not divide the world size {world}"
        )
    if cp > 1 and pp > 1:
        raise ConfigError("parallel.cp > 1 runs with parallel.pp=1 (the stages send whole rows)")
    dp = world // (tp * pp * cp)
    rep, shard = cfg.dp_replicate, cfg.dp_shard
    if rep == 0 and shard == 0:
        if cfg.sharding == "full":
            rep, shard = 1, dp
        elif cfg.sharding == "none":
            rep, shard = dp, 1
        else:
            shard = cfg.shard_size or min(dp, int(os.environ.get("LOCAL_WORLD_SIZE", dp)))
            if shard < 1 or dp % shard:
                raise ConfigError(f"parallel.shard_size={shard} must divide the {dp} data-parallel ranks")
            rep = dp // shard
    elif rep == 0:
        rep = dp // shard if dp % shard == 0 else 0
    elif shard == 0:
        shard = dp // rep if dp % rep == 0 else 0
    layout = Layout(pp, rep, shard, tp, cp)
    if rep * shard * pp * cp * tp != world:
        raise ConfigError(
            f"layout dp_replicate {cfg.dp_replicate} x dp_shard {cfg.dp_shard} x pp {pp} x cp {cp} x tp {tp} "
            f"does not multiply to the world size {world}"
        )
    zero.check_layout(cfg, rep, shard)
    if cfg.cpu_offload and layout.fsdp == 1:
        raise ConfigError("parallel.cpu_offload is FSDP's offload: it needs more than one data-parallel rank")
    if cfg.loss_parallel and pp > 1:
        raise ConfigError("parallel.loss_parallel runs with pp=1 (the pipeline schedule owns the backward)")
    if model is not None:
        why = check_layout(model.moe, model.n_layers, cfg.ep, tp * cp, pp, shard)
        if why:
            raise ConfigError(why)
        if cfg.zero in (1, 2) and (model.moe.experts or model.arch != "decoder"):
            what = "a mixture of experts" if model.moe.experts else f"model.arch={model.arch}"
            raise ConfigError(f"parallel.zero={cfg.zero} is not built for {what} yet: use zero=3 (FSDP2)")
        if model.n_heads % tp or model.kv_heads % tp:
            raise ConfigError(
                f"parallel.tp {tp} must divide model.n_heads {model.n_heads} and the kv heads {model.kv_heads}"
            )
        n_stages = pp * stages_per_rank(cfg)
        if pp > 1 and n_stages > model.n_layers:
            raise ConfigError(
                f"parallel.pp {pp} x {stages_per_rank(cfg)} stages per rank is more stages than "
                f"model.n_layers {model.n_layers}"
            )
        if pp > 1 and model.tie_embeddings:
            raise ConfigError(
                "parallel.pp > 1 needs model.tie_embeddings=false (the tied matrix spans stages)"
            )
        if pp > 1 and cfg.pp_schedule != "interleaved_1f1b" and stages_per_rank(cfg) != 1:
            raise ConfigError(f"parallel.pp_schedule={cfg.pp_schedule} runs one stage per rank")
        if pp > 1 and cfg.pp_schedule == "interleaved_1f1b" and microbatches(cfg) % pp:
            raise ConfigError(f"interleaved_1f1b: parallel.pp_microbatches must be a multiple of pp {pp}")
    return layout


@dataclass
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh  # pp x dp_replicate x dp_shard x cp x tp
    layout: Layout = field(default_factory=lambda: Layout(1, 1, 1, 1))
    context_parallel: ContextParallel | None = None  # cp > 1: this rank's place in its cp group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _coord(self, dim: str) -> int:
        return self.mesh.get_local_rank(dim) if self.world_size > 1 else 0

    @property
    def dp_rank(self) -> int:
        """This rank's slice of the global batch (tp and pp ranks of one replica share it)."""
        return self._coord("dp_replicate") * self.layout.dp_shard + self._coord("dp_shard")

    @property
    def dp_size(self) -> int:
        return self.layout.dp

    @property
    def pp_rank(self) -> int:
        return self._coord("pp")

    @property
    def dp_mesh(self) -> DeviceMesh:
        """FSDP's mesh: 1-D (shard) or 2-D (replicate, shard) for HSDP and replication; with cp > 1 the
        shard dimension is ``dp_shard x cp`` flattened (``build_mesh``)."""
        if self.layout.cp > 1:
            with warnings.catch_warnings():  # torch warns of slicing a flattened dim; it is supported
                warnings.simplefilter("ignore", UserWarning)
                if self.layout.dp_replicate == 1:
                    return self.mesh["dp_shard_cp"]
                return self.mesh["dp_replicate", "dp_shard_cp"]
        if self.layout.dp_replicate == 1:
            return self.mesh["dp_shard"]
        return self.mesh["dp_replicate", "dp_shard"]


def init_distributed(cfg: ParallelConfig, model: ModelConfig | None = None) -> Dist:
    """Start the process group from torchrun's environment (a single process works without torchrun)."""
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    layout = resolve_layout(cfg, world, model)  # before any process group: a bad layout is one line
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        raise ConfigError("parallel.device=cuda but CUDA is not available")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if want_cuda and local_world > torch.cuda.device_count():
        raise ConfigError(
            f"{local_world} processes per node but {torch.cuda.device_count()} CUDA device(s): one process "
            "per GPU (torchrun --nproc_per_node), or parallel.device=cpu for gloo processes on the CPU"
        )
    if want_cuda:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = cfg.backend if cfg.backend != "auto" else ("nccl" if want_cuda else "gloo")
    if backend == "nccl" and not want_cuda:
        raise ConfigError("parallel.backend=nccl needs CUDA devices")
    if not dist.is_initialized():
        store = None
        if world == 1 and "MASTER_PORT" not in os.environ and "RANK" not in os.environ:
            # one process, not started by torchrun: its store on a port the OS picks (two such runs on
            # one machine never collide on a fixed port)
            store = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True)
            os.environ["MASTER_PORT"] = str(store.port)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        os.environ.setdefault("RANK", str(rank))
        os.environ.setdefault("WORLD_SIZE", str(world))
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world,
            store=store,
            device_id=device if want_cuda else None,
        )
    mesh = build_mesh(cfg, world, device.type, model)
    cp = None
    if layout.cp > 1:
        cp = ContextParallel(mesh["cp"].get_group(), layout.cp, mesh.get_local_rank("cp"))
    return Dist(rank, world, local_rank, device, mesh, layout, cp)


def build_mesh(
    cfg: ParallelConfig, world: int, device_type: str, model: ModelConfig | None = None
) -> DeviceMesh:
    layout = resolve_layout(cfg, world, model)
    mesh = init_device_mesh(device_type, layout.sizes, mesh_dim_names=MESH_DIMS)
    if layout.cp > 1:  # FSDP's shard dimension: the data-parallel shards and the cp ranks together
        mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    return mesh


# -- pipeline stages ---------------------------------------------------------------------------------
class Stage(LayerRange):
    """Consecutive blocks of the model, with the embedding (first stage) or the final norm and output
    layer (last stage); its forward is the model's (``LayerRange``). Parameter names are the whole
    model's (``layers.5.attn.wq.weight``), so checkpoints and the optimizer see one model whatever the
    split."""

    def __init__(self, model: Transformer, layer_ids: list[int], first: bool, last: bool) -> None:
        super().__init__()
        self.cfg = model.cfg
        self.tok_embeddings = model.tok_embeddings if first else None
        blocks = model.layers
        assert isinstance(blocks, nn.ModuleList)
        self.layers = nn.ModuleDict({str(i): blocks[i] for i in layer_ids})
        self.norm = model.norm if last else None
        self.output = model.output if last else None
        self.register_buffer("rope", model.rope, persistent=False)
        self.activation_checkpointing = False
        self.checkpoint_every = 1

    def blocks(self) -> Iterator[tuple[int, nn.Module]]:
        return ((int(i), block) for i, block in self.layers.items())


class StageParts(nn.Module):
    """This rank's stages under the whole model's parameter names: what the optimizer, the gradient
    clipping and the checkpoints see. Its own forward is never called (the stages run)."""

    def __init__(self, stages: list[Stage]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict()
        for s in stages:
            if s.tok_embeddings is not None:
                self.tok_embeddings = s.tok_embeddings
            self.layers.update(dict(s.layers.items()))
            if s.norm is not None:
                self.norm, self.output = s.norm, s.output


def stage_ids(cfg: ParallelConfig, pp_rank: int) -> list[int]:
    """Stage indices on this pp rank: ``r`` (one per rank) or ``r, r + pp, ...`` (looped, interleaved)."""
    return pp_math.stage_ids(cfg.pp, pp_rank, stages_per_rank(cfg))


# -- tensor parallel ---------------------------------------------------------------------------------
def apply_tp(model: LayerRange, mesh: DeviceMesh, loss_par: bool) -> None:
    """Megatron-style TP with sequence parallel: between blocks the residual stream is sharded over the
    sequence; attention and MLP gather it, split heads / hidden over tp ranks and reduce-scatter back."""
    if model.tok_embeddings is not None:
        parallelize_module(
            model.tok_embeddings, mesh, RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
        )
    if model.norm is not None and model.output is not None:
        parallelize_module(model.norm, mesh, SequenceParallel())
        parallelize_module(
            model.output,
            mesh,
            ColwiseParallel(
                input_layouts=Shard(1),
                output_layouts=Shard(-1) if loss_par else Replicate(),
                use_local_output=not loss_par,
            ),
        )
    for _, block in model.blocks():
        assert isinstance(block, Block)
        plan = {
            "attn_norm": SequenceParallel(),
            "attn": PrepareModuleInput(
                input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)
            ),
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "ffn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "ffn.w1": ColwiseParallel(),
            "ffn.w3": ColwiseParallel(),
            "ffn.w2": RowwiseParallel(output_layouts=Shard(1)),
        }
        parallelize_module(block, mesh, plan)  # type: ignore[arg-type]


def loss_context(cfg: ParallelConfig) -> contextlib.AbstractContextManager[None]:
    """Around the loss and its backward: cross entropy on vocabulary-sharded logits under loss parallel."""
    return loss_parallel() if cfg.tp > 1 and cfg.loss_parallel else contextlib.nullcontext()


# -- data parallel -----------------------------------------------------------------------------------
def _mp_policy(cfg: ParallelConfig) -> MixedPrecisionPolicy:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[cfg.mixed_precision]
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def _fsdp(module: nn.Module, cfg: ParallelConfig, d: Dist, reshard: bool) -> None:
    offload = CPUOffloadPolicy(pin_memory=d.device.type == "cuda") if cfg.cpu_offload else None
    mp = _mp_policy(cfg)
    ignored = expert_params(module) or None  # expert-parallel weights: sharded over ep (train/moe.py)
    if offload is not None:
        fully_shard(
            module,
            mesh=d.dp_mesh,
            mp_policy=mp,
            reshard_after_forward=reshard,
            offload_policy=offload,
            ignored_params=ignored,
        )
    else:
        fully_shard(
            module, mesh=d.dp_mesh, mp_policy=mp, reshard_after_forward=reshard, ignored_params=ignored
        )


def parallelize(model: nn.Module, cfg: ParallelConfig, d: Dist) -> nn.Module:
    """TP, then activation checkpointing and compile of each block, then FSDP2 (per block, then root).

    On a single data-parallel (and context-parallel) rank there is nothing to shard: the model stays a plain module (with TP, a
    module of DTensors) and bf16 / fp16 come from ``autocast``."""
    if d.layout.tp > 1:
        tp = encoder.apply_tp if isinstance(model, encoder.Encoder) else apply_tp
        tp(model, d.mesh["tp"], cfg.loss_parallel)  # type: ignore[arg-type]
    apply_ep(model, cfg.ep, d.world_size, d.device.type)  # experts split over ep ranks (train/moe.py)
    if isinstance(model, LayerRange | encoder.Encoder):
        model.activation_checkpointing = cfg.activation_checkpointing
        model.checkpoint_every = cfg.checkpoint_every
        model.context_parallel = d.context_parallel
    layers = model.get_submodule("layers")
    assert isinstance(layers, nn.ModuleDict | nn.ModuleList)
    blocks = list(layers.values()) if isinstance(layers, nn.ModuleDict) else list(layers)
    if cfg.compile is True:  # "auto" is settled per device by config.resolve_for_device
        for block in blocks:
            block.compile()  # in place: parameter names (and so checkpoints) stay the same
    if d.layout.fsdp == 1 or cfg.zero == 1:
        return model  # nothing to shard; ZeRO-1: replicated parameters (train/zero.py)
    # the last block's parameters are needed again at once by backward: keep them gathered; stage 2
    # keeps every block's from forward to backward
    reshard = d.layout.pp == 1 and cfg.zero != 2
    for i, block in enumerate(blocks):
        _fsdp(block, cfg, d, reshard=reshard and i < len(blocks) - 1)
    _fsdp(model, cfg, d, reshard=False)
    return model


def is_float8_target(module: nn.Module, fqn: str) -> bool:
    """The blocks' linear layers whose shapes the float8 matmul takes (multiples of 16); the output
    projection stays in bf16 (its logits feed the loss directly)."""
    return (
        isinstance(module, nn.Linear)
        and fqn.startswith("layers.")
        and module.in_features % 16 == 0
        and module.out_features % 16 == 0
    )


def apply_float8(model: nn.Module) -> nn.Module:
    """torchao's float8 training (dynamic tensorwise scaling) on ``is_float8_target`` layers, in place,
    before sharding. Parameter names are unchanged, so checkpoints move between float8 and bf16 runs."""
    from torchao.float8 import convert_to_float8_training

    convert_to_float8_training(model, module_filter_fn=is_float8_target)
    return model


def autocast(cfg: ParallelConfig, d: Dist) -> contextlib.AbstractContextManager[None]:
    """bf16 / fp16 compute without FSDP (with it, FSDP's MixedPrecisionPolicy casts the parameters)."""
    if (d.layout.fsdp == 1 or cfg.zero == 1) and cfg.mixed_precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if cfg.mixed_precision == "bf16" else torch.float16
        return torch.autocast(d.device.type, dtype=dtype)
    return contextlib.nullcontext()


def all_reduce_(t: torch.Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> torch.Tensor:
    """Reduce over all ranks in place (no host sync on CUDA); returns ``t``."""
    if dist.is_initialized():
        dist.all_reduce(t, op=op)
    return t


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()
