"""The output layer and the cross entropy together, a chunk of tokens at a time (``model.fused_loss``).

``linear_cross_entropy(hidden, weight, target, divisor=d)`` is

    F.cross_entropy((hidden @ weight.T).float() / d, target, ignore_index=-100, reduction="sum")

(the model's output layer, muP's logit divisor and the trainer's loss) without the ``[tokens, vocab]``
logits ever existing: for llama-1b's 4 x 2048 tokens and 128,256 ids those are 2 GiB in bf16, 4 GiB in
fp32, and as much again for their gradient. Each chunk of ``chunk_tokens`` rows computes its logits in
the compute dtype (the autocast dtype, else the inputs'), the log-sum-exp and the softmax in fp32, and
at once, as Liger-Kernel's FusedLinearCrossEntropy does, its share of the gradients with respect to the
hidden states and the weight: the chunk's logits are freed before the next chunk's. The backward only
multiplies the stored gradients by the loss's gradient. The cost is those gradients held from forward to
backward (``[tokens, dim]`` and ``[vocab, dim]`` in fp32) instead of the logits. Computing the gradients
in the forward keeps the output layer's three matmuls of the unfused path; recomputing each chunk's
logits in the backward instead would add a fourth (a third more of the output layer's FLOPs).

The gradients are computed before fp16's loss scale is applied, so the trainer refuses
``model.fused_loss`` with ``parallel.mixed_precision=fp16`` (train/config.py), as it refuses the
layouts whose loss does not go through ``forward_backward``'s call (pipeline stages, tensor parallel's
sharded output layer), the encoders (an output bias, or a scaled tied output) and qat (the output
layer's fake quantizer).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.distributed.tensor import DTensor

from llmpipe.plan import LOSS_CHUNK_TOKENS
from llmpipe.train.model import LayerRange

IGNORE_INDEX = -100
#: rows of the logits computed at once: 1024 x 128,256 ids is 0.5 GiB in fp32 (plus 0.25 GiB in bf16)
CHUNK_TOKENS = LOSS_CHUNK_TOKENS
#: rows of the weight's gradient added at once from a bf16 product into its fp32 sum (64 MiB at dim 2048)
VOCAB_BLOCK = 16384


def _eager_grad(
    logits: torch.Tensor, target: torch.Tensor, divisor: float, acc: torch.dtype, grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One chunk's summed loss and (with ``grad``) d loss / d logits in the logits' dtype, from its logits
    [chunk, vocab] in the compute dtype: the fp32 work in one buffer, in place (no compiler needed; fp32
    logits are that buffer, so they are overwritten)."""
    keep = target != IGNORE_INDEX
    col = torch.where(keep, target, 0).unsqueeze(1)  # an ignored row reads column 0, then counts zero
    z = logits.to(acc)
    if divisor != 1.0:
        z.div_(divisor)
    picked = z.gather(1, col).squeeze(1)
    top = z.amax(dim=1, keepdim=True)
    z.sub_(top).exp_()  # exp(logit - max)
    total = z.sum(dim=1, keepdim=True)
    loss = torch.where(keep, (top + total.log()).squeeze(1) - picked, 0.0).sum()
    if not grad:
        return loss, None
    # softmax - one_hot(target) on the kept rows, through the divisor
    row = (keep.to(acc) / divisor).unsqueeze(1)
    z.mul_(row / total).scatter_add_(1, col, -row)
    return loss, z.to(logits.dtype)


def _softmax_grad(
    logits: torch.Tensor, target: torch.Tensor, divisor: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_eager_grad`` written for the compiler, which makes it one read of the logits and one write of
    the gradient (the eager form takes about eight passes over a fp32 copy: llama-1b's fused loss ran
    6% slower than the unfused one on an H100 that way)."""
    acc = torch.promote_types(logits.dtype, torch.float32)
    keep = target != IGNORE_INDEX
    col = torch.where(keep, target, 0).unsqueeze(1)
    z = logits.to(acc) / divisor
    lse = torch.logsumexp(z, dim=1, keepdim=True)
    picked = z.gather(1, col)
    loss = torch.where(keep.unsqueeze(1), lse - picked, 0.0).sum()
    row = (keep.to(acc) / divisor).unsqueeze(1)
    ids = torch.arange(z.shape[1], device=z.device).unsqueeze(0)
    g = (torch.exp(z - lse) - (ids == col).to(acc)) * row
    return loss, g.to(logits.dtype)


_fused_grad_compiled: Any = None


def _fused_grad() -> Any:
    """``_softmax_grad`` compiled (once per process; on CUDA, where it pays)."""
    global _fused_grad_compiled
    if _fused_grad_compiled is None:
        _fused_grad_compiled = torch.compile(_softmax_grad, dynamic=False)
    return _fused_grad_compiled


def _loss_and_grads(
    hidden: torch.Tensor,  # [N, dim]
    weight: torch.Tensor,  # [vocab, dim]
    target: torch.Tensor,  # [N] int64, IGNORE_INDEX where no loss
    dtype: torch.dtype,  # the logits' matmul dtype (autocast's)
    divisor: float,
    chunk_tokens: int,
    grad_hidden: bool,
    grad_weight: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The summed loss and, where asked, its gradients with respect to ``hidden`` and ``weight`` for a loss
    gradient of 1, all in fp32 (fp64 for fp64 inputs)."""
    acc = torch.promote_types(dtype, torch.float32)
    w = weight.to(dtype)
    dev = hidden.device
    loss = torch.zeros((), dtype=acc, device=dev)
    gh = torch.empty(hidden.shape, dtype=acc, device=dev) if grad_hidden else None
    gw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if grad_weight else None
    grad = gh is not None or gw is not None
    fused = _fused_grad() if dev.type == "cuda" else None  # one compiled pass from logits to gradient
    for start in range(0, hidden.shape[0], chunk_tokens):
        h = hidden[start : start + chunk_tokens].to(dtype)
        t = target[start : start + chunk_tokens]
        if fused is not None:
            part, g = fused(h @ w.T, t, divisor)
        else:
            part, g = _eager_grad(h @ w.T, t, divisor, acc, grad)
        loss += part
        if g is None or not grad:
            continue
        if gh is not None:
            gh[start : start + chunk_tokens] = g @ w
        if gw is not None:
            if dtype == gw.dtype:
                gw.addmm_(g.T, h)
            else:  # the bf16 product a block of the vocabulary at a time (a bounded temporary), in fp32
                for v in range(0, gw.shape[0], VOCAB_BLOCK):
                    gw[v : v + VOCAB_BLOCK] += g[:, v : v + VOCAB_BLOCK].T @ h
    return loss, gh, gw


class LinearCrossEntropy(torch.autograd.Function):
    """The summed cross entropy of ``hidden @ weight.T / divisor`` against ``target`` over chunks of rows,
    the gradients computed in the forward (``_loss_and_grads``); call it through
    ``linear_cross_entropy``, which settles the compute dtype."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        target: torch.Tensor,
        dtype: torch.dtype,
        divisor: float,
        chunk_tokens: int,
    ) -> torch.Tensor:
        need_h, need_w = ctx.needs_input_grad[:2]
        loss, gh, gw = _loss_and_grads(hidden, weight, target, dtype, divisor, chunk_tokens, need_h, need_w)
        ctx.save_for_backward(gh, gw)
        ctx.dtypes = hidden.dtype, weight.dtype
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gh, gw = ctx.saved_tensors
        h_dtype, w_dtype = ctx.dtypes
        # in place: the stored gradients are used once (once_differentiable, no retained graph)
        grad_h = None if gh is None else gh.mul_(grad_loss).to(h_dtype)
        grad_w = None if gw is None else gw.mul_(grad_loss).to(w_dtype)
        return grad_h, grad_w, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    *,
    divisor: float = 1.0,
    chunk_tokens: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """``F.cross_entropy((hidden @ weight.T).float() / divisor, target, ignore_index=-100,
    reduction="sum")`` for hidden ``[..., dim]``, weight ``[vocab, dim]``, target ``[...]``, by chunks of
    ``chunk_tokens`` rows. Under autocast the matmuls run in its dtype (as ``nn.Linear`` would), the
    log-sum-exp in fp32. Without grad mode only the loss is computed."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
    dev = hidden.device.type
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else hidden.dtype
    h, t = hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1).long()
    with torch.autocast(dev, enabled=False):  # the dtypes are explicit inside
        if not torch.is_grad_enabled():
            return _loss_and_grads(h, weight, t, dtype, divisor, chunk_tokens, False, False)[0]
        loss = LinearCrossEntropy.apply(h, weight, t, dtype, divisor, chunk_tokens)
    assert isinstance(loss, torch.Tensor)
    return loss


def output_cross_entropy(model: nn.Module, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The summed loss of ``model``'s output layer on ``hidden`` (its ``forward(..., return_hidden=True)``,
    just run): the layer's weight as that forward left it (FSDP2 keeps the root's parameters gathered
    after forward: the gradient goes to the gathered parameter, as the output layer's would; a tied
    output is the embedding's parameter, whose gradient sums both uses) and muP's logit divisor."""
    if not isinstance(model, LayerRange) or model.output is None:
        raise TypeError(f"the fused loss needs a decoder with its output layer, got {type(model).__name__}")
    weight = model.output.weight
    if isinstance(weight, DTensor):  # sharded: tensor parallel, or FSDP resharded after forward
        raise RuntimeError("model.fused_loss needs the whole output weight after forward, found a DTensor")
    return linear_cross_entropy(hidden, weight, target, divisor=model.cfg.width_mult)
