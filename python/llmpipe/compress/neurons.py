"""Neuron pruning: remove whole MLP channels, giving a smaller dense model (a smaller ``ffn_hidden``).

A channel j of a SwiGLU block is row j of w1 and w3 and column j of w2. Its score is
``||w2[:, j]|| * ||w1[j]|| * ||w3[j]||`` (magnitude) or ``||w2[:, j]|| * ||h_j||`` with ``h`` the
calibration activations entering w2 (wanda). Every layer keeps the same number of channels (the model
has one hidden size), the top ``(1 - sparsity)`` share by score, in their original order.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch import nn

from llmpipe.compress.prune import input_norms


@torch.no_grad()
def prune_neurons(model: nn.Module, method: str, sparsity: float, calib: torch.Tensor | None) -> nn.Module:
    from llmpipe.train.model import Transformer

    cfg: Any = model.cfg
    hidden = cfg.hidden
    keep_n = max(1, round((1 - sparsity) * hidden))
    w2_names = [f"layers.{i}.ffn.w2" for i in range(cfg.n_layers)]
    norms = input_norms(model, w2_names, calib) if method == "wanda" and calib is not None else {}
    new_cfg = dataclasses.replace(copy.deepcopy(cfg), ffn_hidden=keep_n)
    small = Transformer(new_cfg)
    state = model.state_dict()
    for i, block in enumerate(model.layers):  # type: ignore[arg-type]
        ffn = block.ffn
        out_norm = ffn.w2.weight.norm(dim=0)
        if method == "wanda":
            score = out_norm * norms[f"layers.{i}.ffn.w2"]
        else:
            score = out_norm * ffn.w1.weight.norm(dim=1) * ffn.w3.weight.norm(dim=1)
        keep = score.argsort(descending=True)[:keep_n].sort().values
        state[f"layers.{i}.ffn.w1.weight"] = ffn.w1.weight[keep].clone()
        state[f"layers.{i}.ffn.w3.weight"] = ffn.w3.weight[keep].clone()
        state[f"layers.{i}.ffn.w2.weight"] = ffn.w2.weight[:, keep].clone()
    if new_cfg.tie_embeddings:
        state.pop("output.weight", None)
    small.load_state_dict(state, strict=not new_cfg.tie_embeddings)
    return small.eval()
