"""train/loss.py: the chunked output layer + cross entropy against ``F.cross_entropy`` on full logits (fp64,
fp32, bf16 autocast and bf16 parameters; ignored targets, chunk sizes, a tied matrix, muP's divisor), and
no logits held for backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from llmpipe.train.loss import linear_cross_entropy


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest difference relative to the reference's largest magnitude (the trainer's grad check measure)."""
    return float((got.double() - want.double()).abs().max() / want.double().abs().max())


def problem(dtype: torch.dtype, n: int = 301, dim: int = 24, vocab: int = 97, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, dim, generator=gen, dtype=dtype)
    weight = torch.randn(vocab, dim, generator=gen, dtype=dtype) / dim**0.5
    target = torch.randint(0, vocab, (n,), generator=gen)
    target[torch.rand(n, generator=gen) < 0.2] = -100  # ignored rows, scattered
    target[:5] = -100  # and a run of them
    return hidden, weight, target


def grads(fn, hidden: torch.Tensor, weight: torch.Tensor, upstream: float = 3.0):
    """The loss and the gradients of ``upstream * loss`` with respect to both inputs."""
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = fn(h, w)
    (loss * upstream).backward()
    return loss.detach(), h.grad, w.grad


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize("chunk", [1, 64, 100, 301, 4096])  # 100 does not divide the 301 rows
@pytest.mark.parametrize("divisor", [1.0, 4.0])  # 4: muP's width multiplier
def test_fused_equals_cross_entropy_on_full_logits(
    dtype: torch.dtype, tol: float, chunk: int, divisor: float
) -> None:
    hidden, weight, target = problem(dtype)

    def full(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        logits = (h @ w.T).to(torch.promote_types(dtype, torch.float32)) / divisor
        return F.cross_entropy(logits, target, ignore_index=-100, reduction="sum")

    def fused(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(h, w, target, divisor=divisor, chunk_tokens=chunk)

    want, got = grads(full, hidden, weight), grads(fused, hidden, weight)
    assert got[0].dtype == want[0].dtype
    for g, w, what in zip(got, want, ("loss", "grad hidden", "grad weight"), strict=True):
        assert rel(g, w) <= tol, (what, rel(g, w))
    assert torch.all(got[1][target == -100] == 0)  # an ignored row gets no gradient


def test_tied_matrix_sums_both_gradients() -> None:
    """The output weight is also the embedding: its gradient is the embedding's plus the loss's."""
    gen = torch.Generator().manual_seed(1)
    emb = torch.randn(97, 24, generator=gen, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 97, (2, 150), generator=gen)
    target = torch.roll(tokens, -1, dims=1)
    target[:, -1] = -100
    proj = torch.randn(24, 24, generator=gen, dtype=torch.float64) / 24**0.5

    def run(fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
        emb.grad = None
        hidden = torch.tanh(F.embedding(tokens, emb) @ proj)  # [2, 150, 24]: batch dims flattened inside
        if fused:
            loss = linear_cross_entropy(hidden, emb, target, chunk_tokens=64)
        else:
            logits = (hidden @ emb.T).flatten(0, 1)
            loss = F.cross_entropy(logits, target.flatten(), ignore_index=-100, reduction="sum")
        loss.backward()
        assert emb.grad is not None
        return loss.detach(), emb.grad.clone()

    (want_loss, want), (got_loss, got) = run(False), run(True)
    assert rel(got_loss, want_loss) <= 1e-12 and rel(got, want) <= 1e-12


def test_no_grad_computes_the_loss_only() -> None:
    hidden, weight, target = problem(torch.float32)
    with torch.no_grad():
        got = linear_cross_entropy(hidden, weight, target, chunk_tokens=50)
    want = F.cross_entropy(hidden @ weight.T, target, ignore_index=-100, reduction="sum")
    assert rel(got, want) <= 1e-6 and not got.requires_grad


def test_frozen_weight_gets_no_gradient() -> None:
    """A LoRA run's output layer is frozen: only the hidden states get a gradient."""
    hidden, weight, target = problem(torch.float32)
    h = hidden.clone().requires_grad_()
    linear_cross_entropy(h, weight, target, chunk_tokens=50).backward()
    _, want, _ = grads(
        lambda h, w: F.cross_entropy(h @ w.T, target, ignore_index=-100, reduction="sum"), hidden, weight, 1.0
    )
    assert weight.grad is None and h.grad is not None and rel(h.grad, want) <= 1e-6


@pytest.mark.parametrize("divisor", [1.0, 4.0])
def test_bf16_autocast_is_the_unfused_autocast_path_within_bf16(divisor: float) -> None:
    """Under autocast (one rank): the matmuls in bf16, the softmax in fp32, like ``nn.Linear`` + ``.float()``;
    with bf16 hidden states and weight and no autocast (FSDP2's bf16 parameters): the same."""
    hidden, weight, target = problem(torch.float32, n=513, dim=64, vocab=300)

    def full(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = F.linear(h, w).float() / divisor
        return F.cross_entropy(logits, target, ignore_index=-100, reduction="sum")

    def fused(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return linear_cross_entropy(h, w, target, divisor=divisor, chunk_tokens=100)

    def fused_bf16(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(h.bfloat16(), w.bfloat16(), target, divisor=divisor, chunk_tokens=100)

    exact = grads(lambda h, w: F.cross_entropy((h @ w.T) / divisor, target, reduction="sum"), hidden, weight)
    want = grads(full, hidden, weight)
    for got in (grads(fused, hidden, weight), grads(fused_bf16, hidden, weight)):
        assert got[0].dtype == torch.float32 and got[1].dtype == got[2].dtype == torch.float32
        assert rel(got[0], want[0]) <= 1e-5, rel(got[0], want[0])
        for i in (1, 2):
            # bf16 keeps 8 bits: a few 2^-8 of the largest gradient, and no further from fp32 than the
            # unfused bf16 path is
            assert rel(got[i], want[i]) <= 1.5e-2, (i, rel(got[i], want[i]))
            assert rel(got[i], exact[i]) <= 2 * rel(want[i], exact[i]) + 1e-3, i
        assert rel(want[1], exact[1]) > 1e-4  # the comparison is really against bf16 arithmetic


def test_saved_for_backward_holds_no_logits() -> None:
    """Between forward and backward the graph holds the gradients (hidden's and weight's shapes), not
    [tokens, vocab] logits as the unfused loss does."""
    hidden, weight, target = problem(torch.float32, n=2000, vocab=500)
    shapes: dict[bool, list[tuple[int, ...]]] = {True: [], False: []}
    for fused in (False, True):

        def pack(t: torch.Tensor, fused: bool = fused) -> torch.Tensor:
            shapes[fused].append(tuple(t.shape))
            return t

        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            if fused:
                loss = linear_cross_entropy(h, w, target, chunk_tokens=256)
            else:
                loss = F.cross_entropy(h @ w.T, target, ignore_index=-100, reduction="sum")
        loss.backward()
    assert (2000, 500) in shapes[False]
    assert sorted(shapes[True]) == [(500, 24), (2000, 24)], shapes[True]
