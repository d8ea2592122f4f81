"""Memory, compute and data budgets of a training run, before it runs (``llmpipe plan``).

Bytes per parameter, by precision (model states, per replica before sharding):

    precision   weights  gradients  optimizer (AdamW)                      source
    fp32        4        4          8 (m, v)                              -
    bf16/fp16   2        2          12 (fp32 master copy 4 + m 4 + v 4)   ZeRO paper (K = 12)
    int8/int4   1 / 0.53 on the trainable (LoRA) fraction only, in bf16 mixed precision

(int4: 4 bits plus one fp16 scale per group of 64 weights, the layout ``llmpipe quantize`` writes and
its tests measure on disk.)

Sharding divides model states over ``F`` ranks: DDP / FSDP ``none`` replicate (F = 1); ZeRO-1 shards
the optimizer states, ZeRO-2 also the gradients, ZeRO-3 / FSDP ``full`` also the weights (F = all
GPUs); FSDP ``hybrid`` shards within groups of ``shard_size`` ranks (F = shard_size), and so do the
ZeRO stages when ``shard_size`` is given. As the trainer runs ZeRO-2 (FSDP2 keeping the weights gathered
from forward to backward), its fp32 weights count FSDP's shard besides the gathered copy, and its
temporaries one block's gradient buffer. CPU offload moves the optimizer states (and the master copy) to
host memory.

Activations per layer (Korthikanti et al. 2022, adapted to a Llama block with SDPA / flash attention,
which stores no s x s score matrix): with 16-bit activations, ``bytes = s*b*h*(12 + 4*kv/heads) +
s*b*H*8`` (norm inputs and outputs, q, k, v, attention output, and four SwiGLU tensors of width H),
doubled for fp32. The output layer keeps the final norm and the logits (16-bit and their fp32 copy:
fp32 logits and the log-softmax output: ``8*s*b*V``). Activation checkpointing keeps only each block's
input (``2*s*b*h``) plus one block's activations during recomputation. Temporaries: the loss gradient
(``8*s*b*V`` at the start of backward), FSDP's all-gathered weights of two blocks (one computing, one
prefetched) and the fp32 gradient buffer of one block.

The components do not all live at once: activations are freed as gradients appear during backward. The
peak is ``weights + optimizer states + max(activations + temporaries, gradients + FSDP buffers)``; this
is what "total" and "fits" use (tests/test_plan.py checks it against the real trainer's model). The
optimizer step of torch's default (foreach) AdamW adds two fp32 copies of the (sharded) parameters;
``--fused-optimizer`` (the trainer's ``optim.fused`` on CUDA) removes them.

Layouts (``--tp``, ``--pp``, ``--microbatches``, ``--pp-schedule``): the GPUs are ``dp x pp x tp``
and the strategy shards over the ``dp`` ranks. Model states per rank are the busiest pipeline stage's
(its blocks plus the embedding or the output layer) divided by tp, then by the data-parallel sharding.
Activations with tensor (sequence) parallel are divided by tp; a pipeline rank holds its blocks'
activations for the micro-batches in flight (GPipe: all m; 1F1B: up to pp; interleaved: up to
``(v-1) pp + 2 (pp-1) + 1`` stage chunks) of ``micro_batch / m`` sequences. The bubble is
``(pp-1) / (m + pp-1)``, ``(pp-1) / (v m + pp-1)`` interleaved (v stages per rank). Communication per
GPU per step: FSDP all-gathers (twice, once with pp) and reduce-scatters, replicas all-reduce, TP moves
8 activation-sized tensors per block (sequence parallel), PP sends activations and gradients across
each stage boundary. tests/train/test_train_plan.py checks the memory against a tp=2 and a pp=2 rank of
the real trainer, and against a rank at each ZeRO stage (``parallel.zero``).

Context parallel (``--cp``): the GPUs are ``dp x cp x pp x tp``; each cp rank holds ``seq_len / cp`` of
every sequence, so every activation is divided by cp, except the keys and values each layer all-gathers
over the cp ranks, which attention keeps for its backward at full length (``4*s*b*h`` in 16-bit, the
grouped-query heads repeated; llmpipe.train.context_parallel explains the all-gather). The model states
are sharded over ``dp x cp`` (FSDP over both, as the trainer does). Communication: per layer, an
all-gather of K and V in forward (again when the block is recomputed) and a reduce-scatter of their
gradients in backward, ``(cp-1)/cp`` of the gathered ``2*s*b*h*kv/heads`` each.

Without a sequence length and micro-batch (a bare parameter count), activations follow the rule of
thumb ``2 x weights`` (so fp32 AdamW training needs about 6 x the weights: ~24 GB for 1B parameters).
Compute: ``6 * N * tokens`` FLOPs (PaLM adds ``12 * layers * h * s`` per token for attention; shown
too). Compute-optimal data: 20 tokens per parameter (Chinchilla), or D_opt(N) from a fitted scaling law. Curation keeps about 1-3% of crawled
tokens (default 2%, or the retention a curate run measured).

An encoder-decoder (``model.arch: encoder_decoder``, train/t5.py) counts both stacks (``n_layers`` each,
the decoder's blocks with cross-attention); its activations are the encoder's over the corrupted input
and the decoder's over the targets (T5's span-corruption lengths for rows of ``seq_len + 1``, noise
density 0.15, mean span 3), and its FLOPs per raw token weigh each stack by the tokens it reads.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from llmpipe.errors import ConfigError
from llmpipe.train import pp_math  # the trainer's pipeline arithmetic (no torch)
from llmpipe.train.span_math import span_lengths  # T5's span-corruption lengths (no torch)

if TYPE_CHECKING:  # the trainer's typed config (train/config.py); llmpipe does not import it at run time
    from llmpipe.train.config import RunConfig
    from llmpipe.train.model import ModelConfig

GB = 1e9
Precision = Literal["fp32", "bf16", "fp16", "int8", "int4"]
Strategy = Literal["ddp", "zero1", "zero2", "zero3", "fsdp_full", "fsdp_hybrid", "fsdp_none"]
PipelineSchedule = Literal["gpipe", "1f1b", "interleaved_1f1b"]
Optimizer = Literal["adamw", "adam8bit", "sgd_momentum", "sgd"]

#: dense bf16 peak TFLOP/s per device (no sparsity), for MFU and GPU-hours
PEAK_TFLOPS = {"h100": 989.0, "h200": 989.0, "b200": 2250.0, "a100": 312.0, "l40s": 362.0, "a10g": 125.0}
T5_BUCKETS, T5_NOISE_DENSITY, T5_MEAN_SPAN = 32, 0.15, 3.0  # train/t5.py, train/span_corruption.py
OPTIMIZER_BYTES = {"adamw": 8.0, "adam8bit": 2.0, "sgd_momentum": 4.0, "sgd": 0.0}


@dataclass
class ModelShape:
    """Enough of a decoder to count parameters and activations."""

    params: int
    dim: int = 0
    n_layers: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0
    hidden: int = 0
    vocab_size: int = 0
    tie_embeddings: bool = False
    # mixture of experts (train/moe.py): ``hidden`` is then the SwiGLU width a token activates, averaged
    # over the blocks (top_k + shared experts' widths in MoE blocks)
    active_params: int = 0  # parameters one token uses (0: all of them, a dense model)
    expert_params: int = 0  # the routed experts' weights, all MoE blocks (split over ep ranks)
    moe_layers: int = 0
    top_k: int = 0
    arch: str = "decoder"  # or encoder; encoder_decoder: n_layers counts the blocks of both stacks
    encoder_params: int = 0  # encoder_decoder: the encoder stack's matmul parameters

    @property
    def active(self) -> int:
        return self.active_params or self.params

    @property
    def known_layout(self) -> bool:
        return self.dim > 0 and self.n_layers > 0

    @classmethod
    def llama(
        cls,
        dim: int,
        n_layers: int,
        n_heads: int,
        vocab_size: int,
        *,
        n_kv_heads: int | None = None,
        ffn_hidden: int | None = None,
        multiple_of: int = 32,
        tie_embeddings: bool = False,
    ) -> ModelShape:
        """The parameter count of train/model.py's Llama-style decoder (it is checked against it)."""
        kv = n_kv_heads or n_heads
        hidden = ffn_hidden or multiple_of * math.ceil(int(8 * dim / 3) / multiple_of)
        head_dim = dim // n_heads
        per_layer = 2 * dim * dim + 2 * dim * kv * head_dim + 3 * dim * hidden + 2 * dim
        emb = vocab_size * dim
        params = emb + n_layers * per_layer + dim + (0 if tie_embeddings else emb)
        return cls(params, dim, n_layers, n_heads, kv, hidden, vocab_size, tie_embeddings)

    @classmethod
    def bert(
        cls, dim: int, n_layers: int, n_heads: int, vocab_size: int, hidden: int, positions: int, tie: bool
    ) -> ModelShape:
        """The parameter count of train/encoder.py's BERT-shaped encoder (checked against it): biases,
        post-norm LayerNorms, learned positions, the prediction head."""
        per_layer = 4 * dim * dim + 4 * dim + 2 * dim * hidden + hidden + dim + 4 * dim
        emb = vocab_size * dim
        head = dim * dim + dim + 2 * dim + vocab_size + (0 if tie else emb)
        params = emb + positions * dim + 2 * dim + n_layers * per_layer + head
        shape = cls(params, dim, n_layers, n_heads, n_heads, hidden, vocab_size, tie)
        shape.arch = "encoder"
        return shape

    @classmethod
    def t5(
        cls, dim: int, n_layers: int, n_heads: int, vocab_size: int, hidden: int, tie_embeddings: bool
    ) -> ModelShape:
        """train/t5.py's encoder-decoder (``n_layers`` per stack; checked against it): per encoder block
        q, k, v, o, the gated feed-forward and two norms; per decoder block also the cross-attention and
        its norm; a position-bias table per stack, two final norms, the embedding and the output."""
        head_dim = dim // n_heads
        inner = n_heads * head_dim
        enc = 4 * dim * inner + 3 * dim * hidden
        dec = 8 * dim * inner + 3 * dim * hidden
        emb = vocab_size * dim
        params = (
            n_layers * (enc + 2 * dim + dec + 3 * dim)
            + 2 * T5_BUCKETS * n_heads
            + 2 * dim
            + emb * (1 if tie_embeddings else 2)
        )
        shape = cls(params, dim, 2 * n_layers, n_heads, n_heads, hidden, vocab_size, tie_embeddings)
        shape.arch, shape.encoder_params = "encoder_decoder", n_layers * enc
        return shape

    @classmethod
    def of(cls, m: ModelConfig, vocab_size: int | None = None) -> ModelShape:
        """The shape of the trainer's model for its typed config (``vocab_size`` overrides the config's)."""
        vocab = vocab_size or m.vocab_size
        if not vocab:
            raise ConfigError("model.vocab_size is taken from the shards; give a vocabulary size")
        if m.arch == "encoder":
            return cls.bert(
                m.dim, m.n_layers, m.n_heads, vocab, m.hidden, m.max_seq_len or 512, m.tie_embeddings
            )
        if m.arch == "encoder_decoder":
            return cls.t5(m.dim, m.n_layers, m.n_heads, vocab, m.hidden, m.tie_embeddings)
        shape = cls.llama(
            m.dim,
            m.n_layers,
            m.n_heads,
            vocab,
            n_kv_heads=m.n_kv_heads,
            ffn_hidden=m.hidden,
            tie_embeddings=m.tie_embeddings,
        )
        e = m.moe
        if not e.experts:
            return shape
        n_moe = sum(e.is_moe(i) for i in range(m.n_layers))
        he = e.expert_hidden or m.hidden
        routed = e.experts * 3 * m.dim * he
        shared = e.shared_experts * 3 * m.dim * he + m.dim if e.shared_experts else 0  # + its gate
        moe_block = m.dim * e.experts + routed + shared  # router, experts, shared expert
        params = shape.params + n_moe * (moe_block - 3 * m.dim * m.hidden)
        active = params - n_moe * (e.experts - e.top_k) * 3 * m.dim * he
        width = ((m.n_layers - n_moe) * m.hidden + n_moe * (e.top_k + e.shared_experts) * he) / m.n_layers
        return dataclasses.replace(
            shape, params=params, hidden=round(width), active_params=active, expert_params=n_moe * routed,
            moe_layers=n_moe, top_k=e.top_k,
        )  # fmt: skip


@dataclass
class PlanInput:
    model: ModelShape
    gpus: int = 1
    gpu_memory_gb: float = 80.0
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    strategy: Strategy = "fsdp_full"
    shard_size: int = 0  # fsdp_hybrid, zero1/2/3: ranks per shard group (0 for zero: all data-parallel ranks)
    cpu_offload: bool = False
    seq_len: int = 0
    micro_batch: int = 0
    activation_checkpointing: bool = False
    trainable_fraction: float = 0.01  # int8 / int4: LoRA-style adapters
    mfu: float = 0.4
    peak_tflops: float = 989.0
    tokens: float = 0.0  # training tokens; 0: compute-optimal
    optimal_tokens: float = 0.0  # compute-optimal tokens (from a scaling fit); 0: 20 per parameter
    retention: float = 0.02
    device: Literal["cuda", "cpu"] = "cuda"
    fused_optimizer: bool = False  # a fused AdamW kernel: no full-size temporaries in the step
    tp: int = 1  # tensor-parallel ranks (sequence parallel: activations split too)
    pp: int = 1  # pipeline stages' ranks
    cp: int = 1  # context-parallel ranks (each holds seq_len / cp of every sequence)
    microbatches: int = 0  # pipeline micro-batches per step (0: pp x stages per rank)
    pp_schedule: PipelineSchedule = "1f1b"
    stages_per_rank: int = 0  # 0: 1, or 2 for interleaved_1f1b
    loss_parallel: bool = False  # tp: vocabulary-sharded logits
    fused_loss: bool = False  # model.fused_loss: the output layer and the loss by chunks, no logits
    ep: int = 1  # expert-parallel ranks (a mixture of experts: the routed experts split over them)


@dataclass
class Plan:
    inputs: dict[str, Any]
    params: int
    shard_factor: int
    memory_gb: dict[str, float]  # per GPU, by component
    total_gb: float
    fits: bool
    max_micro_batch: int | None
    cpu_offload_gb: float
    activation_basis: str
    tokens: float
    compute_optimal_tokens: float
    train_flops: float
    train_flops_with_attention: float
    petaflop_s_days: float
    gpu_hours: float
    wall_clock_hours: float
    retention: float
    raw_tokens_to_crawl: float
    notes: list[str] = field(default_factory=list)
    layout: dict[str, int] = field(default_factory=dict)  # dp_replicate, dp_shard, cp, pp, tp
    params_per_rank: float = 0.0  # before data-parallel sharding: after tp and pp
    bubble_fraction: float = 0.0  # pipeline idle share of a step
    comm_gb: dict[str, float] = field(default_factory=dict)  # bytes each GPU sends per step, by kind
    active_params: int = 0  # a mixture of experts: the parameters one token uses (dense: all)
    flops_per_token: float = 0.0  # training FLOPs per token: 6 x active parameters (+ attention)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dp(p: PlanInput) -> int:
    if p.tp < 1 or p.pp < 1 or p.cp < 1 or p.gpus % (p.tp * p.pp * p.cp):
        cp = f" x cp {p.cp}" if p.cp != 1 else ""
        raise ConfigError(f"tp {p.tp} x pp {p.pp}{cp} does not divide the {p.gpus} GPUs")
    return p.gpus // (p.tp * p.pp * p.cp)


def _stages_per_rank(p: PlanInput) -> int:
    return pp_math.stages_per_rank(p.pp_schedule, p.stages_per_rank)


def _microbatches(p: PlanInput) -> int:
    return pp_math.n_microbatches(p.pp, _stages_per_rank(p), p.microbatches)


def bubble_fraction(p: PlanInput) -> float:
    """Idle share of a pipeline step (the trainer's pipeline arithmetic, llmpipe.train.pp_math)."""
    return pp_math.bubble_fraction(p.pp, p.pp_schedule, _microbatches(p), _stages_per_rank(p))


def _rank_params(p: PlanInput) -> float:
    """Parameters on the busiest rank before data-parallel sharding: a pp stage's blocks plus the larger
    end (embedding, or final norm and output layer), all divided over the tp ranks."""
    m = p.model
    if p.pp == 1 or not m.known_layout:
        return m.params / (p.tp * p.pp)
    emb = m.vocab_size * m.dim
    block = (m.params - emb * (1 if m.tie_embeddings else 2) - m.dim) / m.n_layers
    v = _stages_per_rank(p)
    layers = pp_math.layers_per_stage(m.n_layers, p.pp * v) * v
    return (layers * block + emb + m.dim) / p.tp


def _shard_factors(p: PlanInput) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) sharding factors over the data-parallel ranks (and the
    context-parallel ones, which shard the model states like data-parallel ranks)."""
    n = _dp(p) * p.cp
    # fsdp_hybrid and the ZeRO stages: groups of shard_size ranks (0: all)
    group = p.shard_size * p.cp if p.shard_size else n
    if (p.strategy == "fsdp_hybrid" or p.strategy.startswith("zero")) and n % group:
        raise ConfigError(f"{p.strategy}: {n} GPUs are not a multiple of shard_size {group}")
    return {
        "ddp": (1, 1, 1),
        "fsdp_none": (1, 1, 1),
        "zero1": (1, 1, group),
        "zero2": (1, group, group),
        "zero3": (group, group, group),
        "fsdp_full": (n, n, n),
        "fsdp_hybrid": (group, group, group),
    }[p.strategy]


INT4_GROUP = 64  # weights per scale, llmpipe quantize's default group size
INT4_SCALE_BYTES = 2.0  # one fp16 scale per group


def _per_param_bytes(p: PlanInput) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per model parameter before sharding."""
    opt = OPTIMIZER_BYTES[p.optimizer]
    if p.precision == "fp32":
        return 4.0, 4.0, opt
    if p.precision in ("bf16", "fp16"):
        return 2.0, 2.0, opt + 4.0  # + fp32 master copy
    base = 1.0 if p.precision == "int8" else 0.5 + INT4_SCALE_BYTES / INT4_GROUP
    f = p.trainable_fraction  # frozen quantized base; adapters train in bf16 mixed precision
    return base + 2.0 * f, 2.0 * f, (opt + 4.0) * f


def activation_bytes(p: PlanInput, micro_batch: int) -> float:
    """Activations held at the peak. Tensor parallel with sequence parallel divides every block tensor
    by tp; a pipeline rank holds its own blocks for the micro-batches in flight: all of them (GPipe),
    up to pp (1F1B) or (v - 1) pp + 2 (pp - 1) + 1 stage chunks (interleaved), each of
    ``micro_batch / microbatches`` sequences."""
    m = p.model
    s = p.seq_len / p.cp  # context parallel: each rank holds seq_len / cp of every sequence
    scale = 2.0 if p.precision == "fp32" else 1.0
    if m.arch == "encoder_decoder":
        return _t5_activation_bytes(p, micro_batch, scale)
    kv_ratio = m.n_kv_heads / m.n_heads if m.n_heads else 1.0
    layers, in_flight, b = m.n_layers, 1, float(micro_batch)
    if p.pp > 1:
        v, mb = _stages_per_rank(p), _microbatches(p)
        per_stage = pp_math.layers_per_stage(m.n_layers, p.pp * v)
        b = micro_batch / mb
        if p.pp_schedule == "gpipe":
            layers, in_flight = per_stage * v, mb
        elif p.pp_schedule == "1f1b":
            layers, in_flight = per_stage, min(mb, p.pp)
        else:
            layers, in_flight = per_stage, min(mb * v, (v - 1) * p.pp + 2 * (p.pp - 1) + 1)
    layer = scale * (s * b * m.dim * (12 + 4 * kv_ratio) + s * b * m.hidden * 8) / p.tp
    if p.cp > 1:  # the all-gathered keys and values (heads repeated) that attention keeps
        layer += scale * 4 * p.seq_len * b * m.dim / p.tp
    if p.fused_loss:  # the final norm's output, and the fp32 gradients the loss computes in forward
        head = scale * 2 * s * b * m.dim + 4.0 * s * b * m.dim + 4.0 * m.vocab_size * m.dim
    else:
        head = scale * 2 * s * b * m.dim / p.tp + 8.0 * s * b * m.vocab_size / (
            p.tp if p.loss_parallel else 1
        )
    if p.activation_checkpointing:
        return in_flight * layers * scale * 2 * s * b * m.dim / p.tp + layer + head
    return in_flight * layers * layer + head


def _t5_activation_bytes(p: PlanInput, micro_batch: int, scale: float) -> float:
    """An encoder-decoder's activations: encoder blocks over the corrupted input (Le tokens), decoder
    blocks over the targets (Ld) with the cross-attention's q and output at Ld and its k and v at Le, the
    logits at Ld; Le and Ld from T5's arithmetic for rows of seq_len + 1 tokens (default span settings)."""
    m = p.model
    n = span_lengths(p.seq_len + 1, T5_NOISE_DENSITY, T5_MEAN_SPAN)
    le, ld, b, h = n.inputs, n.targets, float(micro_batch), m.dim
    enc = scale * (le * b * h * 16 + le * b * m.hidden * 8) / p.tp
    dec = scale * (ld * b * h * 24 + 2 * le * b * h * 2 + ld * b * m.hidden * 8) / p.tp
    layers = m.n_layers // 2
    head = scale * 2 * ld * b * h / p.tp + 8.0 * ld * b * m.vocab_size / (p.tp if p.loss_parallel else 1)
    if p.activation_checkpointing:
        return layers * scale * 2 * b * h * (le + ld) / p.tp + max(enc, dec) + head
    return layers * (enc + dec) + head


def t5_flops_per_token(m: ModelShape, seq_len: int) -> tuple[float, float]:
    """(matmul, attention) training FLOPs per raw token of an encoder-decoder: the encoder's matmuls
    over Le tokens, the decoder's (with the output layer) over Ld, per row of seq_len + 1 tokens."""
    n = span_lengths(seq_len + 1, T5_NOISE_DENSITY, T5_MEAN_SPAN)
    dec = m.params - m.encoder_params - m.vocab_size * m.dim * (0 if m.tie_embeddings else 1)
    matmul = 6.0 * (m.encoder_params * n.inputs + dec * n.targets) / n.raw
    attn = 12.0 * (m.n_layers // 2) * m.dim * (n.inputs**2 + n.targets**2 + n.inputs * n.targets) / n.raw
    return matmul, attn


def comm_bytes(p: PlanInput, rank_params: float, wf: int) -> dict[str, float]:
    """Bytes each GPU sends per optimizer step (ring collectives: (n - 1) / n of the buffer each).
    FSDP: all-gather of the compute-dtype weights in forward and again in backward (once with pp, which
    keeps them gathered) and reduce-scatter of fp32 gradients; replicas: all-reduce (2x) of the
    gradient shard. TP (sequence parallel): per block, 2 all-gathers and 2 reduce-scatters of the
    activations in forward and the same in backward. PP: each stage boundary sends the activations
    forward and their gradients back. CP: per layer, the all-gather of K and V (twice with activation
    checkpointing) and the reduce-scatter of their gradients."""
    m = p.model
    cb = 4.0 if p.precision == "fp32" else 2.0
    dp = _dp(p) * p.cp
    of = _shard_factors(p)[2]  # the shard group (wf for FSDP; the optimizer's for ZeRO-1 and -2)
    rep = dp // of if of else 1
    out = {"fsdp": 0.0, "replicate": 0.0, "tp": 0.0, "pp": 0.0, "cp": 0.0}
    if p.strategy == "zero1":  # all-reduce of the whole fp32 gradients, all-gather of the updated rows
        out["replicate"] = 2 * rank_params * 4.0 * (dp - 1) / dp
        out["fsdp"] = rank_params * 4.0 * (of - 1) / of
    else:
        if of > 1:  # ZeRO-2 gathers once per step: the weights stay gathered from forward to backward
            gathers = 1 if p.pp > 1 or p.strategy == "zero2" else 2
            out["fsdp"] = (gathers * rank_params * cb + rank_params * 4.0) * (of - 1) / of
        if rep > 1:
            out["replicate"] = 2 * rank_params / of * 4.0 * (rep - 1) / rep
    if m.known_layout and p.seq_len and p.micro_batch:
        act = p.seq_len / p.cp * p.micro_batch * m.dim * cb
        layers = m.n_layers / p.pp
        if p.cp > 1:
            kv = 2 * p.seq_len * p.micro_batch * m.dim * (m.n_kv_heads / m.n_heads) * cb / p.tp
            passes = 3 if p.activation_checkpointing else 2
            out["cp"] = passes * kv * layers * (p.cp - 1) / p.cp
        if p.tp > 1:
            out["tp"] = 8 * act * layers * (p.tp - 1) / p.tp
        if p.pp > 1:
            out["pp"] = 2 * act * _stages_per_rank(p) / p.tp
        if p.ep > 1 and m.moe_layers:  # each routed copy of a token to its expert's rank and back,
            out["all_to_all"] = 4 * m.top_k * act * m.moe_layers * (p.ep - 1) / p.ep  # forward + backward
    return out


def _fsdp_buffers(p: PlanInput, wf: int) -> float:
    """FSDP's all-gathered weights of two blocks and one block's fp32 gradient buffer; ZeRO-2 keeps
    every block's weights gathered (counted in the weights), so only the gradient buffer."""
    m = p.model
    if not m.known_layout or (wf == 1 and p.strategy != "zero2"):
        return 0.0
    block = (m.params - m.vocab_size * m.dim * (1 if m.tie_embeddings else 2)) / m.n_layers
    compute = 4.0 if p.precision == "fp32" else 2.0
    return (0.0 if p.strategy == "zero2" else 2 * block * compute) + block * 4.0


def _optimizer_step_temporaries(p: PlanInput, n: float, of: int) -> float:
    """The foreach (multi-tensor) AdamW step allocates two fp32 copies of its parameters (sqrt of the
    second moment, and the update); a fused kernel allocates none. Offloaded steps run on the host."""
    if p.fused_optimizer or p.cpu_offload or p.optimizer in ("sgd",):
        return 0.0
    trainable = p.trainable_fraction if p.precision in ("int8", "int4") else 1.0
    return 2 * 4.0 * n * trainable / of


#: tokens whose logits the fused loss computes at once (train/loss.py)
LOSS_CHUNK_TOKENS = 1024


def _loss_temporaries(p: PlanInput, micro_batch: int) -> float:
    """The loss gradient of one (pipeline) micro-batch (this cp rank's positions); vocabulary-sharded
    under loss parallel. The fused loss: one chunk's fp32 logits and their gradient in 16 bits."""
    b = micro_batch / _microbatches(p) if p.pp > 1 else micro_batch
    if p.fused_loss:
        return 6.0 * min(LOSS_CHUNK_TOKENS, p.seq_len / p.cp * b) * p.model.vocab_size
    return 8.0 * p.seq_len / p.cp * b * p.model.vocab_size / (p.tp if p.loss_parallel else 1)


def estimate(p: PlanInput) -> Plan:
    """Per-GPU memory by component, fit, largest micro-batch, compute and data budgets."""
    if p.gpus < 1:
        raise ConfigError("gpus must be at least 1")
    if p.model.arch == "encoder_decoder" and p.pp > 1:
        raise ConfigError("an encoder-decoder trains with pp=1 (no pipeline stages of the two stacks)")
    n = p.model.params
    wf, gf, of = _shard_factors(p)
    wb, gb, ob = _per_param_bytes(p)
    rank_params = _rank_params(p)
    weights = rank_params * wb / wf
    if p.strategy == "zero2" and p.precision == "fp32":  # FSDP2 keeps its shard besides the gathered
        weights += rank_params * wb / of  # weights (in bf16 that shard is the master copy: optimizer)
    grads = rank_params * gb / gf
    opt = rank_params * ob / of
    if p.ep > 1:  # the routed experts are split over the ep ranks instead of the data-parallel sharding
        if not p.model.expert_params or _dp(p) % p.ep:
            raise ConfigError(f"ep {p.ep} needs a mixture of experts and must divide the data-parallel ranks")
        ex, dense = p.model.expert_params, rank_params - p.model.expert_params
        weights, grads, opt = (dense * b / f + ex * b / p.ep for b, f in ((wb, wf), (gb, gf), (ob, of)))
    offload = 0.0
    if p.cpu_offload:
        offload, opt = opt, 0.0
    notes: list[str] = []
    fsdp = _fsdp_buffers(p, wf) / p.tp
    if p.model.known_layout and p.seq_len and p.micro_batch:
        acts = activation_bytes(p, p.micro_batch)
        temps = fsdp + _loss_temporaries(p, p.micro_batch)
        basis = f"formula: seq_len {p.seq_len}, micro-batch {p.micro_batch}; the peak, not the sum"
        step = _optimizer_step_temporaries(p, rank_params, of)
        total = weights + opt + max(acts + temps, grads + fsdp + step)
    else:
        acts, temps = 2.0 * n * wb, fsdp
        basis = "rule of thumb: activations = 2 x weights; give --seq-len and --micro-batch for the formula"
        total = weights + grads + opt + acts + temps
    mem = {
        "weights": weights,
        "gradients": grads,
        "optimizer_states": opt,
        "activations": acts,
        "temporaries": temps,
    }
    budget = p.gpu_memory_gb * GB
    max_mb: int | None = None
    if p.model.known_layout and p.seq_len:
        per_sample = activation_bytes(p, 1) + _loss_temporaries(p, 1)
        room = budget - weights - opt - fsdp
        max_mb = max(0, int(room // per_sample)) if grads <= room else 0
    optimal_tokens = p.optimal_tokens or 20.0 * n
    tokens = p.tokens or optimal_tokens
    flops = 6.0 * p.model.active * tokens  # a mixture of experts: the parameters a token uses
    attn = 12.0 * p.model.n_layers * p.model.dim * p.seq_len * tokens if p.seq_len else 0.0
    if p.model.arch == "encoder_decoder" and p.seq_len:
        matmul, per_token_attn = t5_flops_per_token(p.model, p.seq_len)
        flops, attn = matmul * tokens, per_token_attn * tokens
        notes.append(
            "encoder-decoder: FLOPs per raw token from T5's span-corruption lengths (the encoder reads the "
            "corrupted row, the decoder the targets)"
        )
    peak = p.peak_tflops * 1e12
    gpu_hours = flops / (peak * p.mfu) / 3600.0 if p.mfu > 0 and peak > 0 else math.inf
    if p.precision in ("int8", "int4"):
        notes.append(
            f"{p.precision}: frozen quantized base, {p.trainable_fraction:.1%} trainable (LoRA-style)"
        )
    if p.cpu_offload:
        notes.append(f"CPU offload: {offload / GB:.2f} GB of optimizer states per rank in host memory")
    dp_shard = of // p.cp if of % p.cp == 0 else of  # the cp ranks shard with the dp_shard ones
    return Plan(
        inputs={k: v for k, v in asdict(p).items() if k != "model"},
        params=n,
        shard_factor=wf,
        memory_gb={k: v / GB for k, v in mem.items()},
        total_gb=total / GB,
        fits=total <= budget,
        max_micro_batch=max_mb,
        cpu_offload_gb=offload / GB,
        activation_basis=basis,
        tokens=tokens,
        compute_optimal_tokens=optimal_tokens,
        train_flops=flops,
        train_flops_with_attention=flops + attn,
        petaflop_s_days=flops / (1e15 * 86400.0),
        gpu_hours=gpu_hours,
        wall_clock_hours=gpu_hours / p.gpus,
        retention=p.retention,
        raw_tokens_to_crawl=tokens / p.retention if p.retention > 0 else math.inf,
        notes=notes,
        layout={
            "dp_replicate": _dp(p) // dp_shard,
            "dp_shard": dp_shard,
            "cp": p.cp,
            "pp": p.pp,
            "tp": p.tp,
        },
        params_per_rank=rank_params,
        bubble_fraction=bubble_fraction(p),
        comm_gb={k: v / GB for k, v in comm_bytes(p, rank_params, wf).items()},
        active_params=p.model.active,
        flops_per_token=(flops + attn) / tokens if tokens else 0.0,
    )


def retention_from_curation(directory: str | Path) -> float:
    """The fraction of input words a curate run kept (its stats.json), as a token retention rate."""
    from llmpipe.curate.report import read_stats

    path = Path(directory) / "stats.json"
    ret = read_stats(Path(directory)).get("retention")
    frac = ret.get("word_fraction") if isinstance(ret, dict) else None
    if not isinstance(frac, int | float) or isinstance(frac, bool):
        raise ConfigError(
            f"{path}: retention.word_fraction is {frac!r}, not a number (written by `llmpipe curate`)"
        )
    if not 0 < frac <= 1:
        raise ConfigError(f"{path}: retention {frac} is not in (0, 1]")
    return frac


def human(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def render(plan: Plan) -> str:
    """The whole plan: memory per GPU, then compute and data budgets."""
    return "\n".join(render_memory(plan) + render_budgets(plan))


def render_memory(plan: Plan) -> list[str]:
    """The model and its memory per GPU by component, the peak, and whether it fits."""
    i = plan.inputs
    lines = [
        f"model: {human(plan.params)} parameters; {i['gpus']} GPU(s) x {i['gpu_memory_gb']:g} GB, "
        f"{i['precision']}, {i['optimizer']}, {i['strategy']} (shard factor {plan.shard_factor})"
        + (", activation checkpointing" if i["activation_checkpointing"] else "")
        + (", CPU offload" if i["cpu_offload"] else ""),
        "memory per GPU:",
    ]
    for k, v in plan.memory_gb.items():
        lines.append(f"  {k:17s} {_size(v)}")
    lines.append(f"  {'total (peak)':17s} {_size(plan.total_gb)}  ({plan.activation_basis})")
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    lines.append(f"  -> {verdict} in {i['gpu_memory_gb']:g} GB")
    if plan.max_micro_batch is not None:
        lines.append(f"  largest micro-batch that fits: {plan.max_micro_batch}")
    lay = plan.layout
    lines.append(
        f"layout: dp_replicate {lay['dp_replicate']} x dp_shard {lay['dp_shard']} x cp {lay.get('cp', 1)} x "
        f"pp {lay['pp']} x tp {lay['tp']}; {human(plan.params_per_rank)} parameters per rank before "
        "data-parallel sharding"
    )
    if lay["pp"] > 1:
        lines.append(
            f"  pipeline: {i['pp_schedule']}, {i['microbatches'] or 'default'} micro-batches, "
            f"bubble {plan.bubble_fraction:.1%} of each step"
        )
    if plan.active_params != plan.params:
        lines.append(
            f"mixture of experts: {human(plan.active_params)} of the {human(plan.params)} parameters active "
            f"per token; {plan.flops_per_token:.3e} training FLOPs per token; ep {i['ep']}"
        )
    comm = ", ".join(f"{k} {_size(v).strip()}" for k, v in plan.comm_gb.items() if v > 0) or "none"
    lines.append(f"  communication per GPU per step: {comm}")
    return lines


def render_budgets(plan: Plan) -> list[str]:
    """Training FLOPs, GPU-hours and raw tokens to crawl for the plan's token budget, and the notes."""
    i = plan.inputs
    lines = [
        f"compute for {human(plan.tokens)} tokens (compute-optimal: {human(plan.compute_optimal_tokens)}, "
        + ("from the scaling fit" if i["optimal_tokens"] else "20 per parameter")
        + "):",
        f"  {plan.train_flops:.3e} FLOPs (6 N T); {plan.train_flops_with_attention:.3e} with attention",
        f"  {plan.petaflop_s_days:.3f} petaFLOP/s-days; {plan.gpu_hours:,.1f} GPU-hours at "
        f"{i['mfu']:.0%} MFU of {i['peak_tflops']:g} TFLOP/s; {plan.wall_clock_hours:,.1f} h on {i['gpus']} GPU(s)",
        f"data: crawl {human(plan.raw_tokens_to_crawl)} raw tokens at {plan.retention:.2%} retention",
    ]
    lines += [f"note: {n}" for n in plan.notes]
    return lines


def _size(gb: float) -> str:
    return f"{gb:10.3f} GB" if gb >= 1 else f"{gb * 1000:10.1f} MB"


def plan_for_run(
    cfg: RunConfig,
    *,
    world_size: int,
    local_world_size: int,
    seq_len: int,
    device_memory_gb: float,
    dp_replicate: int = 0,
    dp_shard: int = 0,
    device: Literal["cuda", "cpu"] = "cuda",
) -> Plan:
    """The plan of a train/pretrain.py run from its resolved config (the trainer prints its memory part),
    at its layout: ``dp_replicate`` x ``dp_shard`` as the trainer resolved them (0: from ``sharding``),
    tp and pp from ``parallel``."""
    p = cfg.parallel
    strategies: dict[str, Strategy] = {"full": "fsdp_full", "hybrid": "fsdp_hybrid", "none": "fsdp_none"}
    strategy, shard_size = strategies[p.sharding], (p.shard_size or local_world_size)
    if dp_shard:  # the trainer's FSDP shards over dp_shard x cp
        sharded = dp_shard * p.cp > 1
        strategy = "fsdp_none" if not sharded else ("fsdp_hybrid" if dp_replicate > 1 else "fsdp_full")
        shard_size = dp_shard
    if p.zero:  # a ZeRO stage over the dp_shard ranks (the whole data-parallel group with sharding full)
        zero: dict[int, Strategy] = {1: "zero1", 2: "zero2", 3: "zero3"}
        strategy = zero[p.zero]
        shard_size = dp_shard or (shard_size if p.sharding == "hybrid" else 0)
    return estimate(
        PlanInput(
            model=ModelShape.of(cfg.model),
            gpus=world_size,
            gpu_memory_gb=device_memory_gb,
            precision="fp32" if p.mixed_precision == "fp32" else "bf16",
            strategy=strategy,
            shard_size=shard_size if strategy in ("fsdp_hybrid", "zero1", "zero2", "zero3") else 0,
            cpu_offload=p.cpu_offload,
            seq_len=seq_len,
            micro_batch=cfg.data.batch_size,
            activation_checkpointing=p.activation_checkpointing,
            tp=p.tp,
            pp=p.pp,
            cp=p.cp,
            microbatches=p.pp_microbatches,
            pp_schedule=p.pp_schedule,
            stages_per_rank=p.pp_stages_per_rank,
            loss_parallel=p.loss_parallel,
            fused_loss=cfg.model.fused_loss,
            ep=p.ep,
            device=device,
            fused_optimizer=cfg.optim.fused is True,
        )
    )
