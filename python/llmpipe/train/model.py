"""A Llama-style decoder in one file: RMSNorm, rotary embeddings, SwiGLU, SDPA / FlexAttention.

Read top to bottom: ``ModelConfig`` -> ``RMSNorm`` -> rotary helpers -> ``Attention`` -> ``FeedForward``
-> ``Block`` -> ``LayerRange`` (the forward, shared with pipeline stages) -> ``Transformer``. The
parameter names and the rotary layout (``rotate_half``, as in HF ``LlamaForCausalLM``) are chosen so
that export to transformers is a renaming, never a permutation.

The model is built on the meta device by the trainer, sharded, then materialised with ``to_empty`` and
``init_weights``: no rank ever holds the full model, only one full parameter at a time, and the
weights depend on the seed alone, not on the number of ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
from torch.utils.checkpoint import checkpoint

from llmpipe.train.context_parallel import ContextParallel, KVExchange
from llmpipe.train.moe import MoE, MoEConfig


@dataclass
class ModelConfig:
    # decoder: this file's causal Llama-style model; encoder: a BERT-shaped masked LM (train/encoder.py);
    # encoder_decoder: T5 with span corruption (train/t5.py)
    arch: Literal["decoder", "encoder", "encoder_decoder"] = "decoder"
    dim: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: n_heads (multi-head); fewer: grouped-query attention
    ffn_hidden: int | None = None  # None: 8/3 * dim rounded up to multiple_of
    multiple_of: int = 32
    vocab_size: int | None = None  # None: taken from the shards' manifest
    max_seq_len: int | None = None  # None: the shards' seq_len
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = False
    doc_mask: bool = False  # mask attention across the documents packed into one row
    # how the document mask is applied: flex = a FlexAttention block mask (flash speed, CUDA); sdpa = a
    # dense L x L mask to SDPA; auto = flex on CUDA, sdpa elsewhere. Without doc_mask: SDPA, causal.
    attention: Literal["auto", "sdpa", "flex"] = "auto"
    init_std: float = 0.02
    dropout: float = 0.0  # on the embeddings and each residual branch, in training only
    # muP (maximal update parametrisation): 0 = off (standard parametrisation). Otherwise the width the
    # hyperparameters were tuned at; the width multiplier is dim / mup_base_dim. See docs/training.md.
    mup_base_dim: int = 0
    # a Llama-format HF checkpoint directory to continue from (train/init_from.py)
    init_from: str | None = None
    moe: MoEConfig = field(default_factory=MoEConfig)  # mixture of experts (train/moe.py); experts 0: dense
    # training computes the output layer and the loss together, a chunk of tokens at a time, so the
    # [tokens, vocab] logits never exist (train/loss.py); the decoder only. Evaluation is unchanged.
    fused_loss: bool = False

    def __post_init__(self) -> None:
        for key in ("dim", "n_layers", "n_heads"):
            if getattr(self, key) < 1:
                raise ValueError(f"model.{key} must be at least 1, got {getattr(self, key)}")
        if self.n_kv_heads is not None and self.n_kv_heads < 1:
            raise ValueError(
                f"model.n_kv_heads must be at least 1 (or unset: n_heads), got {self.n_kv_heads}"
            )
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.arch == "encoder" and (self.mup_base_dim or self.init_from or self.kv_heads != self.n_heads):
            raise ValueError("model.arch=encoder has no muP, init_from or grouped-query attention")
        if self.arch == "encoder" and self.moe.experts:
            raise ValueError("model.arch=encoder has no mixture of experts: set model.moe.experts to 0")
        if self.mup_base_dim < 0 or (self.mup_base_dim and self.mup_base_dim % self.n_heads):
            raise ValueError(f"mup_base_dim {self.mup_base_dim} must be 0 or a multiple of n_heads")
        if self.mup_base_dim and self.init_from:
            raise ValueError("init_from loads standard-parametrisation HF weights: set mup_base_dim to 0")
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.kv_heads}")
        if (self.dim // self.n_heads) % 2:
            raise ValueError("the head dimension must be even for rotary embeddings")
        if self.moe.layers is not None and any(not 0 <= i < self.n_layers for i in self.moe.layers):
            raise ValueError(
                f"moe.layers {self.moe.layers}: each must be a block index in [0, {self.n_layers})"
            )
        if self.moe.experts and self.init_from:
            raise ValueError("init_from loads a dense Llama: it does not start a model.moe model")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def width_mult(self) -> float:
        """muP's width multiplier dim / mup_base_dim (1 when muP is off)."""
        return self.dim / self.mup_base_dim if self.mup_base_dim else 1.0

    @property
    def attn_scale(self) -> float | None:
        """The attention logits' scale: None (1/sqrt(head_dim)) without muP; with muP 1/head_dim, times
        sqrt(base head_dim) so that it equals the standard scale at the base width."""
        if not self.mup_base_dim:
            return None
        return math.sqrt(self.mup_base_dim // self.n_heads) / self.head_dim

    @property
    def hidden(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        if self.arch == "encoder":  # BERT's GELU MLP: 4 x dim
            return 4 * self.dim
        h = int(8 * self.dim / 3)
        return self.multiple_of * math.ceil(h / self.multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


def rope_tables(head_dim: int, seq_len: int, theta: float, device: torch.device) -> torch.Tensor:
    """cos and sin for every position, stacked: [2, seq_len, head_dim] (halves repeated, HF layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return torch.stack([angles.cos(), angles.sin()])


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x: [B, H, L, D]; rope: [2, L, D]. Computed in fp32, returned in x's dtype."""
    cos, sin = rope[0], rope[1]
    xf = x.float()
    return (xf * cos + rotate_half(xf) * sin).type_as(x)


# dense bool [B, 1, L, L] (True = may attend), block mask, causal (None), or under context parallelism
# the mask against the keys of every cp rank with their exchange (train/context_parallel.py)
AttnMask = torch.Tensor | BlockMask | KVExchange | None


def attention_kind(cfg: ModelConfig, device: torch.device) -> Literal["sdpa", "flex"]:
    if cfg.attention == "auto":
        return "flex" if device.type == "cuda" else "sdpa"
    return cfg.attention


def doc_mask(
    doc_ids: torch.Tensor, kind: Literal["sdpa", "flex"], causal: bool = True
) -> torch.Tensor | BlockMask:
    """Causal attention within each document of a packed row (doc_ids [B, L]); ``causal=False`` (the
    encoder): every token of the document, both directions. Padding is EOS, which the loader counts as a
    document end: each padding position is its own document and sees only itself (the loss ignores it);
    no query is ever fully masked, the diagonal is always allowed."""
    b, n = doc_ids.shape
    if kind == "sdpa":
        same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
        if causal:
            same_doc = same_doc & torch.ones(n, n, dtype=torch.bool, device=doc_ids.device).tril()
        return same_doc[:, None]  # [B, 1, L, L], True = may attend

    def causal_same_doc(bi: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (q >= kv) & (doc_ids[bi, q] == doc_ids[bi, kv])

    def same_doc_only(bi: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return doc_ids[bi, q] == doc_ids[bi, kv]

    # one mask for all heads; blocks wholly outside every document are skipped by the kernel
    fn = causal_same_doc if causal else same_doc_only
    return create_block_mask(fn, b, None, n, n, device=doc_ids.device)


_flex_compiled: Callable[..., torch.Tensor] | None = None


def _flex(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: BlockMask, scale: float | None
) -> torch.Tensor:
    """flex_attention, compiled on CUDA (eager it runs a dense reference, not the fused kernel)."""
    global _flex_compiled
    fn: Callable[..., torch.Tensor] = flex_attention
    if q.device.type == "cuda":
        if _flex_compiled is None:
            _flex_compiled = torch.compile(flex_attention, dynamic=False)
        fn = _flex_compiled
    out = fn(q, k, v, block_mask=mask, scale=scale)
    assert isinstance(out, torch.Tensor)
    return out


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.scale = cfg.attn_scale
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, mask: AttnMask) -> torch.Tensor:
        b, n, _ = x.shape
        # -1: the heads on this rank (all of them, or n_heads / tp under tensor parallel)
        q = self.wq(x).view(b, n, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        if isinstance(mask, KVExchange):  # context parallel: attend to the whole row's keys
            k, v, mask = mask.gather(k), mask.gather(v), mask.mask
        if self.kv_heads != self.n_heads:  # grouped-query attention: share each k/v head
            rep = self.n_heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if isinstance(mask, BlockMask):
            y = _flex(q, k, v, mask, self.scale)
        elif mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return self.wo(y.transpose(1, 2).reshape(b, n, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn: nn.Module = FeedForward(cfg)
        if cfg.moe.is_moe(layer):  # routed experts in place of the feed-forward layer (train/moe.py)
            self.ffn = MoE(cfg.dim, cfg.moe.expert_hidden or cfg.hidden, cfg.moe)

        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, rope: torch.Tensor, mask: AttnMask) -> torch.Tensor:
        x = x + F.dropout(self.attn(self.attn_norm(x), rope, mask), self.dropout, self.training)
        return x + F.dropout(self.ffn(self.ffn_norm(x)), self.dropout, self.training)


class LayerRange(nn.Module):
    """Consecutive blocks of the model, with the embedding in front when it has it and the final norm and
    output layer behind when it has them: the whole ``Transformer``, or one pipeline stage of it
    (parallel.Stage). Both run this one forward."""

    cfg: ModelConfig
    rope: torch.Tensor  # [2, max_seq_len, head_dim] cos/sin tables, a non-persistent buffer
    tok_embeddings: nn.Embedding | None
    norm: RMSNorm | None
    output: nn.Linear | None
    activation_checkpointing: bool
    checkpoint_every: int  # with activation_checkpointing: blocks 0, N, 2N, ... (model index) recompute
    context_parallel: ContextParallel | None = None  # parallel.cp > 1: inputs hold this rank's chunks

    def blocks(self) -> Iterator[tuple[int, nn.Module]]:
        """(index in the whole model, block), in order."""
        raise NotImplementedError

    def forward(
        self, x: torch.Tensor, doc_ids: torch.Tensor | None = None, *, return_hidden: bool = False
    ) -> torch.Tensor:
        """tokens [B, L] (with the embedding) or hidden states [B, L, dim] -> logits [B, L, vocab] (fp32;
        with the output layer) or hidden states. ``doc_ids`` masks attention across documents.
        ``return_hidden``: the final norm's output [B, L, dim] instead of the logits (the fused loss
        applies the output layer itself, train/loss.py)."""
        n = x.shape[1]
        rope = self.rope[:, :n]
        mask: AttnMask = None
        ids = doc_ids if self.cfg.doc_mask else None
        if self.context_parallel is not None:  # this rank's chunks of each row (context_parallel.py)
            kind = attention_kind(self.cfg, x.device)
            rope, mask = self.context_parallel.attention_inputs(self.rope, n, ids, kind)
        elif ids is not None:
            mask = doc_mask(ids, attention_kind(self.cfg, x.device))
        h = x
        if self.tok_embeddings is not None:
            h = F.dropout(self.tok_embeddings(x), self.cfg.dropout, self.training)
        for i, block in self.blocks():
            if self.activation_checkpointing and self.training and i % self.checkpoint_every == 0:
                h = checkpoint(block, h, rope, mask, use_reentrant=False)
            else:
                h = block(h, rope, mask)
        if self.norm is None or self.output is None:
            return h
        if return_hidden:
            return self.norm(h)
        logits = self.output(self.norm(h)).float()
        if self.cfg.mup_base_dim:  # muP's output multiplier: logits / width_mult
            logits = logits / self.cfg.width_mult
        return logits


class Transformer(LayerRange):
    tok_embeddings: nn.Embedding
    norm: RMSNorm
    output: nn.Linear

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size is None or cfg.max_seq_len is None:
            raise ValueError(
                "vocab_size and max_seq_len must be set (the trainer fills them from the shards)"
            )
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        rope = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta, torch.get_default_device())
        self.register_buffer("rope", rope, persistent=False)
        self.activation_checkpointing = False
        self.checkpoint_every = 1

    @torch.no_grad()
    def init_weights(self, seed: int = 0, only: dict[str, torch.Tensor] | None = None) -> None:
        """Fill every parameter and buffer (after ``to_empty``): N(0, std), the output projections of
        each block scaled down by sqrt(2 * n_layers) as in GPT-2, norms at one, rotary tables recomputed.
        The values are drawn on the CPU from ``seed``, so a GPU run starts from the CPU run's weights.
        With muP the hidden matrices (every block's linear layers) take std / sqrt(width_mult): variance
        in 1 / fan_in; the embedding and output matrices keep std. The values depend on the seed only,
        not on how the parameters are sharded (see ``_fill``).

        ``only``: a pipeline stage's parameters by name; this model is then the whole model on the meta
        device, every parameter is drawn in order and only the stage's are kept (the same values)."""
        if only is None:
            self.rope.copy_(
                rope_tables(
                    self.cfg.head_dim, self.cfg.max_seq_len or 0, self.cfg.rope_theta, self.rope.device
                )
            )
        gen: torch.Generator | None = None
        hidden_std = self.cfg.init_std / math.sqrt(self.cfg.width_mult)
        for name, p in self.named_parameters():  # a tied output matrix is the embedding: filled once
            target = p if only is None else only.get(name)
            if gen is None:  # on the CPU whatever the device: the same weights on CPU and GPU
                gen = torch.Generator().manual_seed(seed)
            std: float | None = self.cfg.init_std
            if name.endswith("norm.weight"):
                std = None
            elif name.endswith(("attn.wo.weight", "ffn.w2.weight", "ffn.w2", "ffn.shared.w2.weight")):
                std = hidden_std / math.sqrt(2 * self.cfg.n_layers)
            elif name.startswith("layers."):
                std = hidden_std
            if target is not None:
                _fill(target, std, gen)
            elif std is not None:  # another stage's: draw it all the same, so the stream stays aligned
                torch.empty(p.shape, dtype=p.dtype, device=gen.device).normal_(0.0, std, generator=gen)
        for name, buf in self.named_buffers():
            if name.endswith("expert_bias"):  # MoE bias balancing starts neutral
                buf.zero_()

    def blocks(self) -> Iterator[tuple[int, nn.Module]]:
        return enumerate(self.layers)


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if isinstance(p, DTensor) else p


def _fill(p: torch.Tensor, std: float | None, gen: torch.Generator) -> None:
    """N(0, std) (ones when std is None) drawn for the whole tensor, then this rank's shard kept: the
    same weights on any number of ranks and in a plain unsharded model. Only one full parameter is
    held at a time."""
    full = torch.empty(p.shape, dtype=p.dtype)
    if std is None:
        full.fill_(1.0)
    else:
        full.normal_(0.0, std, generator=gen)
    full = full.to(_local(p).device)
    if isinstance(p, DTensor):  # every rank drew the same values: slice locally, no communication
        full = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
    p.copy_(full)


def count_params(model: nn.Module, *, exclude_embeddings: bool = False) -> int:
    """Parameters (each shared tensor once); DTensor shards count at their full size."""
    seen: set[int] = set()
    total = 0
    for name, p in model.named_parameters():
        if id(p) in seen or (exclude_embeddings and "tok_embeddings" in name):
            continue
        seen.add(id(p))
        total += p.numel()
    return total
