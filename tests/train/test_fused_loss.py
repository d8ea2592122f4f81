"""``model.fused_loss`` (train/loss.py): the chunked output layer + cross entropy against ``F.cross_entropy``
on full logits (fp64, fp32, bf16 autocast and bf16 parameters; ignored targets, chunk sizes, a tied matrix,
muP's divisor), the trainer's step with it against the step without (gradient accumulation, the loss and
gradient scales, MoE's auxiliary loss), no [tokens, vocab] tensor created, 2 FSDP2 processes under
torchrun giving the unfused run's losses, and the layouts it refuses."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, read_metrics, torchrun, train_losses
from llmpipe.data import Batch, ShardDataset, TokenLoader
from llmpipe.errors import ConfigError
from llmpipe.train.config import RunConfig, validate
from llmpipe.train.loss import _eager_grad, _softmax_grad, linear_cross_entropy
from llmpipe.train.model import ModelConfig, Transformer
from llmpipe.train.moe import MoEConfig
from llmpipe.train.trainer import forward_backward
from torch.utils._python_dispatch import TorchDispatchMode


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


@pytest.mark.parametrize("divisor", [1.0, 4.0])
def test_the_compiled_chunk_gradient_is_the_eager_one(divisor: float) -> None:
    """The chunk's loss and d loss / d logits as CUDA runs them (``_softmax_grad`` through torch.compile;
    here inductor's CPU code) equal the in-place eager form's, ignored rows included, in fp32 and from
    bf16 logits."""
    hidden, weight, target = problem(torch.float32, n=130, vocab=517)
    for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2)):
        logits = (hidden @ weight.T).to(dtype)
        want_loss, want_g = _eager_grad(logits.clone(), target, divisor, torch.float32, True)  # in place
        assert want_g is not None and want_g.dtype == dtype
        for fn in (_softmax_grad, torch.compile(_softmax_grad, dynamic=False)):
            loss, g = fn(logits, target, divisor)
            assert g.dtype == dtype and g.shape == logits.shape
            assert rel(loss, want_loss) < 1e-6
            assert rel(g, want_g) < tol
            assert not g[target == -100].any()  # an ignored row has no gradient


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
def test_bf16_autocast_is_the_unfused_autocast_path_within_bf16(
    divisor: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under autocast (one rank): the matmuls in bf16, the softmax in fp32, like ``nn.Linear`` + ``.float()``;
    with bf16 hidden states and weight and no autocast (FSDP2's bf16 parameters): the same. The weight's
    gradient is summed in fp32 from blocks of 128 of the 300 rows (the last one shorter)."""
    monkeypatch.setattr("llmpipe.train.loss.VOCAB_BLOCK", 128)
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


# -- the trainer's step -------------------------------------------------------------------------------
def shard_batches(shards: Path, n: int, batch: int) -> list[Batch]:
    """``n`` loader batches of real text, every seventh target ignored besides the loader's padding."""
    loader = iter(TokenLoader(ShardDataset(shards, "train", verify="none"), batch, seed=5, prefetch=1))
    out = []
    for _ in range(n):
        b = next(loader)
        target = b.target.clone()
        target.view(-1)[::7] = -100
        out.append(Batch(b.input, target, b.doc_ids))
    return out


def step_grads(cfg: ModelConfig, batches: list[Batch], fused: bool, amp=None) -> tuple[float, dict]:
    torch.manual_seed(0)
    model = Transformer(cfg)
    model.init_weights(seed=0)
    tokens = sum(int((b.target != -100).sum()) for b in batches)
    kw = {"amp": amp} if amp is not None else {}
    loss = forward_backward(model, batches, tokens, 1, 1.5, grad_scale=4.0, fused_loss=fused, **kw)
    return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


TINY = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=257, max_seq_len=64, doc_mask=True)


@pytest.mark.parametrize(
    "cfg",
    [
        replace(TINY, tie_embeddings=True),
        replace(TINY, mup_base_dim=32),  # logits / 2
        replace(TINY, moe=MoEConfig(experts=4, top_k=2)),  # with the auxiliary loss
    ],
    ids=["tied", "mup", "moe"],
)
def test_trainer_step_fused_equals_unfused(byte_shards: Path, cfg: ModelConfig) -> None:
    """forward_backward over two micro-batches, loss scale 1.5 and gradient scale 4: the same summed loss
    and every parameter's gradient (fp32)."""
    batches = shard_batches(byte_shards, 2, 4)
    want_loss, want = step_grads(cfg, batches, fused=False)
    got_loss, got = step_grads(cfg, batches, fused=True)
    assert abs(got_loss - want_loss) <= 1e-6 * want_loss
    assert sorted(got) == sorted(want)
    if cfg.tie_embeddings:
        assert "output.weight" not in want  # one matrix, its gradient from both uses
    for name, g in want.items():
        assert rel(got[name], g) <= 2e-6, (name, rel(got[name], g))


def test_trainer_step_under_bf16_autocast(byte_shards: Path) -> None:
    batches = shard_batches(byte_shards, 2, 4)
    amp = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    want_loss, want = step_grads(TINY, batches, fused=False, amp=amp)
    got_loss, got = step_grads(TINY, batches, fused=True, amp=amp)
    assert abs(got_loss - want_loss) <= 1e-5 * want_loss  # the same bf16 logits, the same fp32 softmax
    for name, g in want.items():  # the gradients' bf16 roundings differ: a few 2^-8 of the largest
        assert rel(got[name], g) <= 1.5e-2, (name, rel(got[name], g))


class LargestLogits(TorchDispatchMode):
    """The most elements of any tensor with a vocabulary-sized dimension that an operation creates while
    the mode is on."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.largest: tuple[int, tuple[int, ...]] = (0, ())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else [out]:
            if isinstance(t, torch.Tensor) and self.vocab in t.shape and t.numel() > self.largest[0]:
                self.largest = (t.numel(), tuple(t.shape))
        return out


def test_no_tokens_by_vocab_tensor_is_created(byte_shards: Path) -> None:
    """One training step of 2048 tokens (2 chunks of the default 1024): no operation of the forward or the
    backward creates a [tokens, vocab] tensor, only [1024, vocab] ones; the unfused step does (the probe
    sees it)."""
    (batch,) = shard_batches(byte_shards, 1, 32)
    n, vocab = batch.target.numel(), TINY.vocab_size or 0
    assert n == 2048
    largest = {}
    for fused in (False, True):
        model = Transformer(TINY)
        model.init_weights(seed=0)
        with LargestLogits(vocab) as probe:
            forward_backward(model, [batch], n, 1, fused_loss=fused)
        largest[fused] = probe.largest
    assert largest[False][0] == n * vocab, largest
    assert largest[True] == (1024 * vocab, (1024, vocab)), largest


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


# -- runs ---------------------------------------------------------------------------------------------
RUN = [
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--train.steps=8", "--train.log_every=1",
    "--train.val_every=4", "--train.val_batches=2", "--metrics.tensorboard=false", "--data.batch_size=4",
    "--train.grad_accum=2", "--model.tie_embeddings=true", "--checkpoint.every=0",
]  # fmt: skip


# bf16: FSDP2's bf16 parameters (hidden states and output weight in bf16, no autocast), whose gradients
# round in another order: measured within 5e-6 of the unfused run
@pytest.mark.parametrize(("precision", "tol"), [("fp32", 1e-5), ("bf16", 1e-4)])
def test_fsdp_run_with_fused_loss_gives_the_unfused_losses(
    byte_shards: Path, tmp_path: Path, precision: str, tol: float
) -> None:
    """2 gloo processes, FSDP2 (the tied output matrix in the root's unit), 2 micro-batches per step: the
    training and validation losses of the unfused run over 8 steps."""
    args = ["--data", str(byte_shards), *RUN, f"--parallel.mixed_precision={precision}"]
    torchrun(2, *args, "--out", str(tmp_path / "plain"))
    torchrun(2, *args, "--out", str(tmp_path / "fused"), "--model.fused_loss=true")
    plain, fused = train_losses(tmp_path / "plain"), train_losses(tmp_path / "fused")
    assert sorted(plain) == sorted(fused) == list(range(1, 9))
    assert plain[8] < plain[1] - 0.5, plain  # it trains
    for step, loss in plain.items():
        assert abs(fused[step] - loss) <= tol * loss, (step, loss, fused[step])
    val = {r["step"]: r["val_loss"] for r in read_metrics(tmp_path / "plain") if "val_loss" in r}
    fused_val = {r["step"]: r["val_loss"] for r in read_metrics(tmp_path / "fused") if "val_loss" in r}
    assert sorted(val) == sorted(fused_val) == [0, 4, 8]
    for step, loss in val.items():  # evaluation is the logits path: the fused run's model evaluates the same
        assert abs(fused_val[step] - loss) <= tol * loss, (step, loss, fused_val[step])


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"model": {"arch": "encoder"}}, "model.arch=encoder"),
        ({"model": {"arch": "encoder_decoder"}}, "model.arch=encoder_decoder"),
        ({"parallel": {"pp": 2}}, r"parallel.pp > 1"),
        ({"parallel": {"tp": 2, "loss_parallel": True}}, r"parallel.tp > 1"),
        ({"parallel": {"tp": 2}}, r"parallel.tp > 1"),
        ({"parallel": {"mixed_precision": "fp16"}}, "parallel.mixed_precision=fp16"),
        ({"qat": {"scheme": "int8"}}, "qat"),
    ],
)
def test_unsupported_layouts_are_one_line_config_errors(change: dict, expect: str, byte_shards: Path) -> None:
    cfg = RunConfig()
    cfg.data.path = byte_shards
    cfg.model.fused_loss = True
    validate(cfg)  # the decoder on FSDP / one rank, bf16 or fp32: runs
    for section, values in change.items():
        for key, value in values.items():
            setattr(getattr(cfg, section), key, value)
    with pytest.raises(ConfigError, match=f"model.fused_loss does not run with {expect}") as e:
        validate(cfg)
    assert "\n" not in str(e.value)
    cfg.model.fused_loss = False
    validate(cfg)  # the same settings without the fused loss pass this check


def test_refusal_from_the_command_line(byte_shards: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train/pretrain.py"), "--data", str(byte_shards), "--out", str(tmp_path / "r"),
         "--model.fused_loss=true", "--parallel.pp=2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: model.fused_loss does not run with parallel.pp > 1 "
        "(the last pipeline stage computes its loss on the logits)"
    ], proc.stderr
    assert not (tmp_path / "r").exists()
