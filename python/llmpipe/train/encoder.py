"""The encoder (``model.arch=encoder``): a BERT-shaped masked language model in one file.

Learned absolute positions, LayerNorm after each residual sum (post-norm), a GELU MLP of 4 x dim, biases
everywhere, and BERT's prediction head (dense -> GELU -> LayerNorm -> vocabulary with a bias). Attention
is bidirectional; with ``model.doc_mask`` a token attends only to the tokens of its own document in the
packed row. This is exactly ``transformers.BertForMaskedLM`` (token type embeddings at zero), so export
(train/encoder_hf.py) is a renaming. The masking itself is train/mlm.py.

Built on the meta device, parallelised (``apply_tp`` here, FSDP2 in train/parallel.py), materialised and
filled by ``init_weights`` from the seed alone, as the decoder (train/model.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.nn.attention.flex_attention import BlockMask
from torch.utils.checkpoint import checkpoint

from llmpipe.train.model import AttnMask, ModelConfig, _fill, _flex, attention_kind, doc_mask


class EncoderAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.dim)
        self.wk = nn.Linear(cfg.dim, cfg.dim)
        self.wv = nn.Linear(cfg.dim, cfg.dim)
        self.wo = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor, mask: AttnMask) -> torch.Tensor:
        b, n, _ = x.shape
        # -1: the heads on this rank (all of them, or n_heads / tp under tensor parallel)
        q = self.wq(x).view(b, n, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, -1, self.head_dim).transpose(1, 2)
        if isinstance(mask, BlockMask):
            y = _flex(q, k, v, mask, None)
        elif mask is None or isinstance(mask, torch.Tensor):  # None: every token of the row, both ways
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # a context-parallel exchange: the encoder refuses parallel.cp > 1 (train/config.py)
            raise TypeError("the encoder does not run under context parallelism")
        return self.wo(y.transpose(1, 2).reshape(b, n, -1))


class EncoderFeedForward(nn.Module):
    """w2(gelu(w1 x)), exact (erf) GELU as BERT's ``hidden_act="gelu"``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class EncoderBlock(nn.Module):
    """Post-norm: x = LN(x + attn(x)); x = LN(x + ffn(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn = EncoderAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.ffn = EncoderFeedForward(cfg)
        self.ffn_norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, mask: AttnMask) -> torch.Tensor:
        x = self.attn_norm(x + F.dropout(self.attn(x, mask), self.dropout, self.training))
        return self.ffn_norm(x + F.dropout(self.ffn(x), self.dropout, self.training))


class MlmHead(nn.Module):
    """BERT's prediction transform before the output layer: dense -> GELU -> LayerNorm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.dim, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(x)))


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size is None or cfg.max_seq_len is None:
            raise ValueError(
                "vocab_size and max_seq_len must be set (the trainer fills them from the shards)"
            )
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos_embeddings = nn.Embedding(cfg.max_seq_len, cfg.dim)
        self.emb_norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.layers = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_layers))
        self.head = MlmHead(cfg)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.activation_checkpointing = False
        self.checkpoint_every = 1

    def forward(self, x: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, L] -> logits [B, L, vocab] (fp32) at every position; ``doc_ids`` keeps attention
        inside each document of a packed row."""
        b, n = x.shape
        mask: AttnMask = None
        if self.cfg.doc_mask and doc_ids is not None:
            mask = doc_mask(doc_ids, attention_kind(self.cfg, x.device), causal=False)
        pos = torch.arange(n, device=x.device).expand(b, n)
        h = self.emb_norm(self.tok_embeddings(x) + self.pos_embeddings(pos))
        h = F.dropout(h, self.cfg.dropout, self.training)
        for i, block in enumerate(self.layers):
            if self.activation_checkpointing and self.training and i % self.checkpoint_every == 0:
                h = checkpoint(block, h, mask, use_reentrant=False)
            else:
                h = block(h, mask)
        return self.output(self.head(h)).float()

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """BERT's initialisation from the seed alone (any sharding gives the same weights): every matrix
        and embedding N(0, init_std), biases zero, LayerNorm weights one."""
        gen: torch.Generator | None = None
        for name, p in self.named_parameters():  # a tied output matrix is the embedding: filled once
            if gen is None:  # on the CPU whatever the device (model.py's _fill): CPU and GPU runs agree
                gen = torch.Generator().manual_seed(seed)
            if name.endswith("bias"):
                p.zero_()
            elif "norm" in name:
                p.fill_(1.0)
            else:
                _fill(p, self.cfg.init_std, gen)


def apply_tp(model: Encoder, mesh: DeviceMesh, loss_par: bool) -> None:
    """Megatron-style TP with sequence parallel, as the decoder's: between blocks the residual stream is
    sharded over the sequence (the LayerNorms run there), attention and MLP gather it, split heads /
    hidden over the tp ranks and reduce-scatter back."""
    rows = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    seq = SequenceParallel(use_local_output=True)  # the residual stream: this rank's part of the sequence
    parallelize_module(model.tok_embeddings, mesh, rows)
    parallelize_module(model.pos_embeddings, mesh, rows)
    parallelize_module(model.emb_norm, mesh, seq)
    for block in model.layers:
        plan = {
            "attn": PrepareModuleInput(
                input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
            ),
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            "attn_norm": seq,
            "ffn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "ffn.w1": ColwiseParallel(),
            "ffn.w2": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": seq,
        }
        parallelize_module(block, mesh, plan)  # type: ignore[arg-type]
    parallelize_module(model.head, mesh, {"dense": seq, "norm": seq})
    parallelize_module(
        model.output,
        mesh,
        ColwiseParallel(
            input_layouts=Shard(1),
            output_layouts=Shard(-1) if loss_par else Replicate(),
            use_local_output=not loss_par,
        ),
    )
