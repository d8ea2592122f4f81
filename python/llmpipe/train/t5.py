"""A T5 v1.1-shaped encoder-decoder (``model.arch=encoder_decoder``), trained with span corruption.

The same function as transformers' ``T5ForConditionalGeneration`` with ``feed_forward_proj=gated-gelu``:
a shared embedding; an encoder and a decoder stack of pre-norm blocks (RMSNorm without mean or bias, no
biases anywhere, attention without the 1/sqrt(d) scale); relative position buckets (32 buckets, max
distance 128; bidirectional in the encoder, causal in the decoder) whose bias is computed once per stack
and added to every self-attention; cross-attention in each decoder block without a position bias; the
gated-GELU feed-forward (tanh GELU). A tied output matrix scales the decoder's output by dim**-0.5, as T5
does. Export (train/export_t5.py) is a renaming of the parameters.

Reuses the decoder's config keys: ``dim``, ``n_layers`` (per stack), ``n_heads``, ``ffn_hidden``,
``norm_eps``, ``init_std``, ``dropout``, ``tie_embeddings``. Parallelism: FSDP2 over each block, tensor
parallel (heads and the feed-forward hidden split, vocabulary-parallel embedding, column-parallel output).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.checkpoint import checkpoint

from llmpipe.errors import ConfigError
from llmpipe.tokenizer import sentinel_token
from llmpipe.train.config import ParallelConfig, RunConfig
from llmpipe.train.model import ModelConfig, RMSNorm, _fill
from llmpipe.train.parallel import Dist, _fsdp
from llmpipe.train.span_corruption import PAD_TOKEN, SpanCorruptor
from llmpipe.train.span_math import SpanLengths

NUM_BUCKETS = 32
MAX_DISTANCE = 128


def check_config(cfg: ModelConfig) -> None:
    """What the encoder-decoder does not take from the decoder's keys: one line each."""
    if cfg.n_kv_heads not in (None, cfg.n_heads):
        raise ConfigError("model.arch=encoder_decoder: T5 attention has no grouped-query heads (n_kv_heads)")
    if cfg.mup_base_dim or cfg.init_from:
        raise ConfigError("model.arch=encoder_decoder takes no model.mup_base_dim or model.init_from")


def relative_buckets(q_len: int, k_len: int, bidirectional: bool, device: torch.device) -> torch.Tensor:
    """T5's ``_relative_position_bucket`` for every (query, key) pair: [q_len, k_len] bucket ids."""
    rel = torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]
    n = NUM_BUCKETS
    buckets = torch.zeros_like(rel)
    if bidirectional:
        n //= 2
        buckets += (rel > 0).long() * n
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    exact = n // 2
    large = exact + (torch.log(rel.float() / exact) / math.log(MAX_DISTANCE / exact) * (n - exact)).to(
        torch.long
    )
    large = torch.clamp(large, max=n - 1)
    return buckets + torch.where(rel < exact, rel, large)


class T5Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        inner = cfg.n_heads * cfg.head_dim
        self.wq = nn.Linear(cfg.dim, inner, bias=False)
        self.wk = nn.Linear(cfg.dim, inner, bias=False)
        self.wv = nn.Linear(cfg.dim, inner, bias=False)
        self.wo = nn.Linear(inner, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, kv: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``bias``: [1 or B, heads on this rank, Lq, Lk] added to the logits (position bias, causal
        mask); T5 scales no logits."""
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, -1, self.head_dim).transpose(1, 2)
        k = self.wk(kv).view(b, kv.shape[1], -1, self.head_dim).transpose(1, 2)
        v = self.wv(kv).view(b, kv.shape[1], -1, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.to(q.dtype) if bias is not None else None, scale=1.0
        )
        return self.wo(y.transpose(1, 2).reshape(b, n, -1))


class GatedGelu(nn.Module):
    """T5 v1.1's feed-forward: w2(gelu_tanh(w1 x) * w3 x) (HF: wo(gelu_new(wi_0 x) * wi_1 x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim, bias=False)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.w1(x), approximate="tanh") * self.w3(x)
        return self.w2(F.dropout(h, self.dropout, self.training))


class T5Block(nn.Module):
    """Self-attention, cross-attention (decoder blocks), feed-forward; each pre-norm and residual."""

    def __init__(self, cfg: ModelConfig, decoder: bool) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = T5Attention(cfg)
        self.cross_norm = RMSNorm(cfg.dim, cfg.norm_eps) if decoder else None
        self.cross = T5Attention(cfg) if decoder else None
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = GatedGelu(cfg)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, bias: torch.Tensor, enc: torch.Tensor | None = None) -> torch.Tensor:
        def drop(t: torch.Tensor) -> torch.Tensor:
            return F.dropout(t, self.dropout, self.training)

        h = self.attn_norm(x)
        x = x + drop(self.attn(h, h, bias))
        if self.cross is not None and self.cross_norm is not None and enc is not None:
            x = x + drop(self.cross(self.cross_norm(x), enc, None))
        return x + drop(self.ffn(self.ffn_norm(x)))


class T5Stack(nn.Module):
    def __init__(self, cfg: ModelConfig, decoder: bool) -> None:
        super().__init__()
        self.decoder = decoder
        self.rel_bias = nn.Embedding(NUM_BUCKETS, cfg.n_heads)
        self.layers = nn.ModuleList(T5Block(cfg, decoder) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.dropout = cfg.dropout
        self.activation_checkpointing = False
        self.checkpoint_every = 1

    def position_bias(self, n: int, device: torch.device) -> torch.Tensor:
        """[1, heads, n, n]: the relative position bias (heads on this rank), plus -inf above the
        diagonal in the decoder."""
        buckets = relative_buckets(n, n, not self.decoder, device)
        bias = self.rel_bias(buckets).permute(2, 0, 1).unsqueeze(0).float()
        if self.decoder:
            causal = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
            bias = bias.masked_fill(causal, torch.finfo(torch.float32).min)
        return bias

    def forward(self, h: torch.Tensor, enc: torch.Tensor | None = None) -> torch.Tensor:
        bias = self.position_bias(h.shape[1], h.device)
        h = F.dropout(h, self.dropout, self.training)
        for i, block in enumerate(self.layers):
            if self.activation_checkpointing and self.training and i % self.checkpoint_every == 0:
                h = checkpoint(block, h, bias, enc, use_reentrant=False)
            else:
                h = block(h, bias, enc)
        return F.dropout(self.norm(h), self.dropout, self.training)


class T5(nn.Module):
    """forward(encoder ids [B, Le], decoder input ids [B, Ld]) -> logits [B, Ld, vocab] (fp32)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size is None:
            raise ValueError("vocab_size must be set (the trainer fills it from the shards)")
        check_config(cfg)
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)  # HF: shared
        self.encoder = T5Stack(cfg, decoder=False)
        self.decoder = T5Stack(cfg, decoder=True)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)  # HF: lm_head
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def encode(self, enc_ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.tok_embeddings(enc_ids))

    def forward(self, enc_ids: torch.Tensor, dec_ids: torch.Tensor | None) -> torch.Tensor:
        assert dec_ids is not None, "the encoder-decoder needs the decoder's input ids"
        h = self.decoder(self.tok_embeddings(dec_ids), self.encode(enc_ids))
        if self.cfg.tie_embeddings:
            h = h * self.cfg.dim**-0.5
        return self.output(h).float()

    def blocks(self) -> Iterator[T5Block]:
        for stack in (self.encoder, self.decoder):
            for block in stack.layers:
                assert isinstance(block, T5Block)
                yield block

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """T5's initialisation (``T5PreTrainedModel._init_weights``, factor ``init_std / 0.02``): the
        embedding N(0, 1), the output N(0, dim^-1/2), queries N(0, (dim * head_dim)^-1/2), keys, values
        and the feed-forward's input N(0, dim^-1/2), attention outputs N(0, inner^-1/2), the
        feed-forward's output N(0, hidden^-1/2), the position biases N(0, dim^-1/2), norms one. Drawn
        from the seed alone, whatever the sharding or device (model._fill)."""
        c = self.cfg
        f = c.init_std / 0.02
        inner = c.n_heads * c.head_dim
        stds = {
            "attn.wq": (c.dim * c.head_dim) ** -0.5,
            "cross.wq": (c.dim * c.head_dim) ** -0.5,
            "wk": c.dim**-0.5,
            "wv": c.dim**-0.5,
            "wo": inner**-0.5,
            "ffn.w1": c.dim**-0.5,
            "ffn.w3": c.dim**-0.5,
            "ffn.w2": c.hidden**-0.5,
            "rel_bias": c.dim**-0.5,
        }
        gen = torch.Generator().manual_seed(seed)  # on the CPU: the same weights on CPU and GPU
        for name, p in self.named_parameters():
            std: float | None
            if name.endswith("norm.weight"):
                std = None
            elif name == "tok_embeddings.weight":
                std = f * 1.0
            elif name == "output.weight":
                std = f * c.dim**-0.5
            else:
                key = name.removesuffix(".weight")
                std = next(f * s for k, s in stds.items() if key.endswith(k))
            _fill(p, std, gen)


# -- parallelism -------------------------------------------------------------------------------------
def _replicated(module: nn.Module, mesh: DeviceMesh) -> None:
    """A norm under tensor parallel: its weight a replicated DTensor (every parameter of a tp model is a
    DTensor, as the gradient norm needs), its input and output plain tensors."""

    def inp(_: nn.Module, args: tuple[object, ...], m: DeviceMesh) -> tuple[object, ...]:
        return tuple(
            DTensor.from_local(a, m, [Replicate()], run_check=False)
            if isinstance(a, torch.Tensor) and not isinstance(a, DTensor)
            else a
            for a in args
        )

    def out(_: nn.Module, o: torch.Tensor, m: DeviceMesh) -> torch.Tensor:
        return o.to_local() if isinstance(o, DTensor) else o

    distribute_module(module, mesh, input_fn=inp, output_fn=out)  # type: ignore[arg-type]  # torch's hint says None


def apply_tp(model: T5, mesh: DeviceMesh, loss_par: bool) -> None:
    """Megatron-style tensor parallel (no sequence parallel): the embedding split over the vocabulary,
    q/k/v and the feed-forward's w1/w3 column-wise (heads and hidden units), wo and w2 row-wise, each
    stack's position bias split over heads, the output column-wise (vocabulary-sharded logits under loss
    parallel)."""
    if model.cfg.tie_embeddings:
        raise ConfigError("model.arch=encoder_decoder with parallel.tp > 1 needs model.tie_embeddings=false")
    parallelize_module(model.tok_embeddings, mesh, RowwiseParallel(input_layouts=Replicate()))
    parallelize_module(
        model.output,
        mesh,
        ColwiseParallel(output_layouts=Shard(-1) if loss_par else Replicate(), use_local_output=not loss_par),
    )
    for stack in (model.encoder, model.decoder):
        parallelize_module(stack.rel_bias, mesh, ColwiseParallel())  # [buckets, heads]: this rank's heads
        _replicated(stack.norm, mesh)
    for block in model.blocks():
        plan = {
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(),
            "ffn.w1": ColwiseParallel(),
            "ffn.w3": ColwiseParallel(),
            "ffn.w2": RowwiseParallel(),
        }
        if block.cross is not None:
            plan |= {f"cross.{w}": ColwiseParallel() for w in ("wq", "wk", "wv")}
            plan["cross.wo"] = RowwiseParallel()
        parallelize_module(block, mesh, plan)  # type: ignore[arg-type]
        for norm in (block.attn_norm, block.cross_norm, block.ffn_norm):
            if norm is not None:
                _replicated(norm, mesh)


def parallelize(model: T5, cfg: ParallelConfig, d: Dist) -> T5:
    """TP, then activation checkpointing and compile of each block, then FSDP2 (each block of both
    stacks, then the root: the shared embedding, the position biases, the final norms, the output)."""
    if d.layout.tp > 1:
        apply_tp(model, d.mesh["tp"], cfg.loss_parallel)
    for stack in (model.encoder, model.decoder):
        stack.activation_checkpointing = cfg.activation_checkpointing
        stack.checkpoint_every = cfg.checkpoint_every
    blocks = list(model.blocks())
    if cfg.compile is True:
        for block in blocks:
            block.compile()
    if d.layout.dp == 1:
        return model
    for i, block in enumerate(blocks):
        _fsdp(block, cfg, d, reshard=i < len(blocks) - 1)
    _fsdp(model, cfg, d, reshard=False)
    return model


def build_model(cfg: RunConfig, d: Dist) -> T5:
    """On the meta device, parallelised, then only this rank's shards allocated and initialised."""
    with torch.device("meta"):
        model = T5(cfg.model)
    parallelize(model, cfg.parallel, d)
    model.to_empty(device=d.device)
    model.init_weights(seed=cfg.train.seed)
    return model


def check_run(cfg: RunConfig) -> None:
    """What an encoder-decoder run refuses, each with one line (before any process starts work)."""
    check_config(cfg.model)
    p = cfg.parallel
    refused = [
        (p.pp > 1, "parallel.pp > 1 (pipeline stages of the two stacks)"),
        (p.float8, "parallel.float8"),
        (cfg.lora.rank > 0, "lora"),
        (cfg.qat.scheme != "none", "qat"),
        (cfg.init.from_hf is not None, "init.from_hf"),
        (
            cfg.eval.every > 0,
            "eval.every (bits per byte is a decoder's measure; the val loss is span corruption's)",
        ),
    ]
    for bad, what in refused:
        if bad:
            raise ConfigError(f"model.arch=encoder_decoder does not run with {what}")


def reserved_extra_ids(reserved: Mapping[str, int], spans: int) -> int | None:
    """The id of ``<pad>`` when the shards reserved ``<pad>`` and at least ``spans`` sentinels right after
    it (``llmpipe curate --special-tokens t5``); None when they reserved no sentinel. Sentinels
    reserved elsewhere, or too few, are a ConfigError."""
    if sentinel_token(0) not in reserved:
        if PAD_TOKEN in reserved:  # T5's <pad> sits right before the sentinels: it cannot be appended again
            raise ConfigError(
                f"the shards reserve {PAD_TOKEN} but no sentinels: curate with --special-tokens t5 (or mlm,t5) "
                "for an encoder-decoder"
            )
        return None
    pad = reserved.get(PAD_TOKEN)
    have = next((k for k in range(len(reserved) + 1) if sentinel_token(k) not in reserved), 0)
    if pad is None or any(reserved[sentinel_token(k)] != pad + 1 + k for k in range(have)):
        raise ConfigError(
            f"the shards reserve {sentinel_token(0)} but not as span corruption needs them: {PAD_TOKEN} "
            f"then {sentinel_token(0)}, {sentinel_token(1)}, ... at consecutive ids (curate --special-tokens t5)"
        )
    if have < spans:
        raise ConfigError(
            f"span corruption of these rows needs {spans} sentinels; the shards reserve {have} "
            f"({sentinel_token(0)}..{sentinel_token(have - 1)}): curate shorter rows or lower span.noise_density"
        )
    return pad


def prepare(
    cfg: RunConfig, vocab: int, seq_len: int, eos_id: int, reserved: Mapping[str, int] | None = None
) -> SpanCorruptor:
    """Settle the extra ids and the model's vocabulary; both are saved in the run's config.yaml. The
    extra ids are those the shards reserved (``reserved``: their manifest's special tokens), else the
    ids after the tokenizer's ``vocab``, by which the vocabulary grows when model.vocab_size is not set."""
    check_run(cfg)
    # each packed row is one T5 example (as T5 packs): the document mask is the decoder's option
    cfg.model.doc_mask, cfg.model.attention = False, "auto"
    span = cfg.span
    spans = SpanCorruptor(span, seq_len + 1, eos_id, cfg.data.seed).lengths.spans  # (checks span's values)
    pad = reserved_extra_ids(reserved or {}, spans)
    if pad is not None:
        if span.extra_ids_from not in (0, pad):
            raise ConfigError(
                f"span.extra_ids_from {span.extra_ids_from}: the shards reserve {PAD_TOKEN} and the "
                f"sentinels from id {pad}; leave it unset"
            )
        span.extra_ids_from = pad
    elif span.extra_ids_from == 0:
        span.extra_ids_from = vocab
    elif span.extra_ids_from < vocab:
        raise ConfigError(f"span.extra_ids_from {span.extra_ids_from} is inside the tokenizer's {vocab} ids")
    corruptor = SpanCorruptor(span, seq_len + 1, eos_id, cfg.data.seed)
    need = max(vocab, span.extra_ids_from + corruptor.extra_ids)
    if cfg.model.vocab_size is None:
        cfg.model.vocab_size = need
    elif cfg.model.vocab_size < need:
        raise ConfigError(
            f"model.vocab_size {cfg.model.vocab_size} has no room for span corruption's {corruptor.extra_ids} "
            f"extra ids (<pad> and {corruptor.lengths.spans} sentinels) after id {span.extra_ids_from - 1}: "
            f"set it to at least {need}, or leave it unset"
        )
    return corruptor


def stack_params(cfg: ModelConfig) -> tuple[int, int]:
    """Matmul parameters of the encoder and of the decoder (the decoder with the output layer)."""
    inner = cfg.n_heads * cfg.head_dim
    enc = cfg.n_layers * (4 * cfg.dim * inner + 3 * cfg.dim * cfg.hidden)
    dec = cfg.n_layers * (8 * cfg.dim * inner + 3 * cfg.dim * cfg.hidden) + cfg.dim * (cfg.vocab_size or 0)
    return enc, dec


def flops_per_target(cfg: ModelConfig, lengths: SpanLengths) -> float:
    """Training FLOPs per target (decoder) token: 6 x matmul parameters x the tokens each stack reads,
    plus attention (12 x dim per query and key pair: encoder self, decoder self, cross)."""
    enc, dec = stack_params(cfg)
    le, ld = lengths.inputs, lengths.targets
    inner = cfg.n_heads * cfg.head_dim
    attn = 12.0 * cfg.n_layers * inner * (le * le + ld * ld + ld * le)
    return (6.0 * (enc * le + dec * ld) + attn) / ld


def summary(corruptor: SpanCorruptor) -> str:
    n = corruptor.lengths
    first = corruptor.first_sentinel
    return (
        f"span corruption: rows of {n.raw} tokens -> encoder {n.inputs}, decoder {n.targets} tokens "
        f"({n.noise} noise tokens in {n.spans} spans); <pad> {corruptor.pad_id}, sentinels "
        f"{first}..{first + n.spans - 1}"
    )
