"""Context parallelism: the ``cp`` ranks of a data-parallel replica each hold 1/cp of every sequence.

The split is the load-balanced causal one of torchtitan and Megatron-LM: a row of length L is cut into
2*cp chunks and cp rank i holds chunks i and 2*cp-1-i (an early chunk, cheap under the causal mask, and
a late one, expensive), so every rank attends over the same number of (query, key) pairs. All cp ranks
read the same batch from the loader; ``shard`` keeps this rank's tokens, targets and document ids.

Attention exchanges keys and values by an **all-gather** over the cp group (after the rotary embedding,
before grouped-query heads are repeated): each rank's queries attend to the keys of the whole row,
masked by global positions (causal) and document ids (``model.doc_mask``; the ids are all-gathered with
the keys). The backward reduce-scatters the keys' and values' gradients back to the ranks that made
them. All-gather rather than a ring: one collective per layer on any backend (gloo included), exact
equality with one process, and the same SDPA / FlexAttention kernels on the gathered keys; the price is
O(L) memory for one layer's keys and values per rank (the activations kept for backward stay O(L/cp))
and no overlap of the exchange with compute, which a ring (pass blocks of K/V around cp-1 times, with
an online softmax) would give at long context. Rotary positions are each token's global position.

The loss stays a sum over this rank's targets divided by the global target count; parameter gradients
are reduced over ``dp_shard x cp`` flattened (FSDP2 shards the parameters over both, as torchtitan
does), so checkpoints do not depend on cp and load at any other cp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from llmpipe.data import Batch
from llmpipe.errors import ConfigError


class _GatherSeq(torch.autograd.Function):
    """All-gather along the sequence dim (2 of [B, H, L, D]) in rank order; backward reduce-scatters."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup, size: int) -> torch.Tensor:
        ctx.group, ctx.size = group, size
        out = x.new_empty((size * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(out, x.contiguous(), group=group)
        b, h, n, d = x.shape
        return out.view(size, b, h, n, d).permute(1, 2, 0, 3, 4).reshape(b, h, size * n, d)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        b, h, total, d = grad.shape
        n = total // ctx.size
        pieces = grad.reshape(b, h, ctx.size, n, d).permute(2, 0, 1, 3, 4).contiguous()
        out = grad.new_empty((b, h, n, d))
        dist.reduce_scatter_tensor(out, pieces.view(ctx.size * b, h, n, d), group=ctx.group)
        return out, None, None


@dataclass(frozen=True)
class KVExchange:
    """What attention needs under cp: the mask of this rank's queries against the gathered keys (dense
    bool [B or 1, 1, Lq, L] for SDPA, or a BlockMask) and the exchange itself."""

    mask: torch.Tensor | BlockMask
    cp: ContextParallel

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        return self.cp.gather(t)


class ContextParallel:
    """One rank's place in its cp group: which tokens it holds and how it exchanges keys and values."""

    def __init__(self, group: dist.ProcessGroup, size: int, rank: int) -> None:
        self.group, self.size, self.rank = group, size, rank

    def check_seq_len(self, seq_len: int) -> None:
        if seq_len % (2 * self.size):
            raise ConfigError(
                f"parallel.cp {self.size} splits each sequence into {2 * self.size} chunks: the sequence "
                f"length {seq_len} must be a multiple of {2 * self.size}"
            )

    def positions(self, n_local: int, rank: int, device: torch.device) -> torch.Tensor:
        """Global positions of ``rank``'s tokens: chunk ``rank`` then chunk ``2*cp-1-rank``."""
        c = n_local // 2
        first = torch.arange(rank * c, (rank + 1) * c, device=device)
        last = 2 * self.size - 1 - rank
        return torch.cat([first, torch.arange(last * c, (last + 1) * c, device=device)])

    def gathered_positions(self, n_local: int, device: torch.device) -> torch.Tensor:
        """Global positions of the all-gathered keys (rank 0's tokens, rank 1's, ...)."""
        return torch.cat([self.positions(n_local, r, device) for r in range(self.size)])

    def shard(self, b: Batch) -> Batch:
        """This rank's tokens, targets and document ids of a full-length batch."""
        n = b.input.shape[1]
        self.check_seq_len(n)
        idx = self.positions(n // self.size, self.rank, b.input.device)
        doc = b.doc_ids.index_select(1, idx) if b.doc_ids is not None else None
        return Batch(b.input.index_select(1, idx), b.target.index_select(1, idx), doc)

    @torch.compiler.disable  # a compiled block calls the collective eagerly (a graph break)
    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """[B, H, L/cp, D] -> [B, H, L, D] in gathered order, differentiable."""
        out = _GatherSeq.apply(t, self.group, self.size)
        assert isinstance(out, torch.Tensor)
        return out

    def _gather_ids(self, ids: torch.Tensor) -> torch.Tensor:
        b, n = ids.shape
        out = ids.new_empty((self.size * b, n))
        dist.all_gather_into_tensor(out, ids.contiguous(), group=self.group)
        return out.view(self.size, b, n).permute(1, 0, 2).reshape(b, self.size * n)

    def attention_inputs(
        self,
        rope: torch.Tensor,
        n_local: int,
        doc_ids: torch.Tensor | None,
        kind: Literal["sdpa", "flex"],
    ) -> tuple[torch.Tensor, KVExchange]:
        """The rotary tables at this rank's global positions ([2, L/cp, D] from the model's [2, L, D])
        and the mask of its queries against every rank's keys (causal by global position, within each
        document when ``doc_ids`` [B, L/cp] is given)."""
        device = rope.device
        q_pos = self.positions(n_local, self.rank, device)
        k_pos = self.gathered_positions(n_local, device)
        k_doc = self._gather_ids(doc_ids) if doc_ids is not None else None
        mask: torch.Tensor | BlockMask
        if kind == "sdpa":
            dense = (q_pos[:, None] >= k_pos[None, :])[None]  # [1, Lq, L]
            if doc_ids is not None and k_doc is not None:
                dense = dense & (doc_ids[:, :, None] == k_doc[:, None, :])
            mask = dense[:, None]
        else:
            q_doc = doc_ids

            def causal_same_doc(
                bi: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
            ) -> torch.Tensor:
                ok = q_pos[q] >= k_pos[kv]
                if q_doc is not None and k_doc is not None:
                    ok = ok & (q_doc[bi, q] == k_doc[bi, kv])
                return ok

            b = doc_ids.shape[0] if doc_ids is not None else None
            mask = create_block_mask(causal_same_doc, b, None, n_local, self.size * n_local, device=device)
        return rope[:, q_pos], KVExchange(mask, self)
