"""NF4 (4-bit NormalFloat, QLoRA): 16 levels at the quantiles of a standard normal, scaled per block.

torchao 0.18 no longer ships ``torchao.dtypes.nf4tensor`` and bitsandbytes' NF4 needs CUDA, so the
codebook is implemented here. Each block of ``group_size`` weights along the input dimension is divided
by its absolute maximum and every value mapped to the nearest of the 16 levels; the code (4 bits, two
per byte) and the block's fp32 absmax are stored. Weights are dequantized on the fly at each forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from llmpipe.compress.pack import pack_nibbles, unpack_nibbles

# The NF4 levels of QLoRA (Dettmers et al., 2023): normal quantiles normalised to [-1, 1], exact zero.
NF4_LEVELS = torch.tensor(
    [
        -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
        -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
        0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
        0.7229568362236023, 1.0,
    ]
)  # fmt: skip


def nf4_quantize(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """w [rows, cols] -> (packed uint8 [rows, cols/2], absmax fp32 [rows, cols/group_size])."""
    rows, cols = w.shape
    blocks = w.detach().float().reshape(rows, cols // group_size, group_size)
    absmax = blocks.abs().amax(-1).clamp(min=1e-12)
    x = blocks / absmax[..., None]
    mid = (NF4_LEVELS[1:] + NF4_LEVELS[:-1]) / 2  # nearest level = count of midpoints below
    codes = torch.bucketize(x, mid).reshape(rows, cols)
    return pack_nibbles(codes), absmax


def nf4_dequantize(packed: torch.Tensor, absmax: torch.Tensor) -> torch.Tensor:
    codes = unpack_nibbles(packed).long()
    rows, cols = codes.shape
    vals = NF4_LEVELS.to(absmax.device)[codes].reshape(rows, absmax.shape[1], -1)
    return (vals * absmax[..., None]).reshape(rows, cols)


class NF4Weight(nn.Module):
    """Shared storage of the NF4 modules: ``packed`` codes and ``absmax`` per block, as buffers."""

    packed: torch.Tensor
    absmax: torch.Tensor

    def _store(self, w: torch.Tensor, group_size: int) -> None:
        packed, absmax = nf4_quantize(w, group_size)
        self.register_buffer("packed", packed)
        self.register_buffer("absmax", absmax)

    def dequantized(self) -> torch.Tensor:
        return nf4_dequantize(self.packed, self.absmax)


class NF4Linear(NF4Weight):
    def __init__(self, linear: nn.Linear, group_size: int) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("NF4Linear: biased linears are not used by this model")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._store(linear.weight, group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantized().to(x.dtype))


class NF4Embedding(NF4Weight):
    def __init__(self, emb: nn.Embedding, group_size: int) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = emb.num_embeddings, emb.embedding_dim
        self._store(emb.weight, group_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.dequantized())


def apply_nf4(model: nn.Module, group_size: int, modules: list[tuple[str, nn.Module]]) -> None:
    for name, mod in modules:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        new = NF4Linear(mod, group_size) if isinstance(mod, nn.Linear) else NF4Embedding(mod, group_size)  # type: ignore[arg-type]
        setattr(parent, attr, new)
