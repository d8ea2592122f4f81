"""Document masking through FlexAttention equals the dense masked SDPA, and the CUDA-only options are
refused on CPU with one line.

torch refuses FlexAttention's backward on CPU by a device check only (its fused backward kernel is GPU
code). The gradient test lifts that check: the autograd of the flex_attention operator then runs its
eager reference path (the one CUDA uses without torch.compile) with our block mask and mask_mod, which
is what must agree with the dense mask. The compiled GPU kernels are checked by bench/bench_gpu.py.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.attention.flex_attention as flex_module
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.errors import ConfigError
from llmpipe.train.config import RunConfig, resolve_for_device, validate
from llmpipe.train.model import ModelConfig, Transformer, doc_mask
from llmpipe.train.parallel import apply_float8
from torch import nn
from torch.nn.attention.flex_attention import BlockMask

ROOT = Path(__file__).resolve().parents[2]


def padded_doc_ids(b: int, n: int, seed: int) -> torch.Tensor:
    """Rows of several documents of random lengths, then an EOS padding tail (one document per token,
    as the loader numbers it)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(b):
        pad = int(torch.randint(0, n // 3, (), generator=gen))
        ends = torch.zeros(n, dtype=torch.int32)
        ends[torch.randint(1, n - pad, (4,), generator=gen)] = 1  # up to 4 document ends
        ends[n - pad :] = 1
        rows.append(torch.cumsum(ends, 0, dtype=torch.int32))
    return torch.stack(rows)


def twin_models(vocab: int, seq_len: int) -> tuple[Transformer, Transformer]:
    cfg = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, doc_mask=True, attention="sdpa")
    cfg.vocab_size, cfg.max_seq_len = vocab, seq_len
    dense = Transformer(cfg)
    dense.init_weights(seed=0)
    flex = copy.deepcopy(dense)
    flex.cfg = dataclasses.replace(cfg, attention="flex")
    return dense, flex


def test_block_mask_is_the_dense_mask() -> None:
    doc_ids = padded_doc_ids(3, 200, seed=1)
    bm = doc_mask(doc_ids, "flex")
    assert isinstance(bm, BlockMask)
    dense = doc_mask(doc_ids, "sdpa")
    b, h, q, kv = torch.meshgrid(
        torch.arange(3), torch.zeros(1, dtype=torch.long), torch.arange(200), torch.arange(200), indexing="ij"
    )
    assert torch.equal(bm.mask_mod(b, h, q, kv), dense.expand(3, 1, 200, 200))
    assert bm.sparsity() > 0  # whole blocks above the diagonal or across documents are skipped


def test_flex_forward_backward_equal_dense(byte_shards: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = ShardDataset(byte_shards, "train")
    batch = next(iter(TokenLoader(ds, 4, seed=3, prefetch=1)))
    assert batch.doc_ids is not None and int(batch.doc_ids.max()) > 0  # several documents per row
    synthetic = padded_doc_ids(4, ds.seq_len, seed=2)
    monkeypatch.setattr(flex_module, "_validate_device", lambda *args: None)  # see the module docstring
    dense, flex = twin_models(ds.vocab_size, ds.seq_len)
    for doc_ids in (batch.doc_ids, synthetic):
        grads = []
        logits = []
        for model in (dense, flex):
            model.zero_grad(set_to_none=True)
            out = model(batch.input, doc_ids)
            out.square().mean().backward()
            logits.append(out.detach())
            grads.append({n: p.grad for n, p in model.named_parameters()})
        torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=1e-5)
        for name, g in grads[0].items():
            assert g is not None and grads[1][name] is not None
            torch.testing.assert_close(grads[1][name], g, rtol=1e-5, atol=1e-5, msg=name)
    # and the dense path really masks: without doc ids the logits differ
    assert not torch.allclose(dense(batch.input), logits[0], atol=1e-3)


def _cfg(**parallel: object) -> RunConfig:
    cfg = RunConfig()
    for k, v in parallel.items():
        setattr(cfg.parallel, k, v)
    return cfg


def test_auto_keys_settle_per_device() -> None:
    cfg = RunConfig()
    assert cfg.parallel.compile == "auto" and cfg.optim.fused == "auto" and cfg.model.attention == "auto"
    resolve_for_device(cfg, torch.device("cpu"))
    assert cfg.parallel.compile is False and cfg.optim.fused is False
    kept = _cfg(compile=True)
    kept.optim.fused = True
    resolve_for_device(kept, torch.device("cpu"))
    assert kept.parallel.compile is True and kept.optim.fused is True


def test_cuda_only_options_refused_on_cpu() -> None:
    with pytest.raises(ConfigError, match="float8 needs a CUDA GPU"):
        resolve_for_device(_cfg(float8=True), torch.device("cpu"))
    flex = RunConfig()
    flex.model.doc_mask, flex.model.attention = True, "flex"
    with pytest.raises(ConfigError, match="flex trains only on CUDA"):
        resolve_for_device(flex, torch.device("cpu"))
    flex.model.doc_mask = False
    with pytest.raises(ConfigError, match="set model.doc_mask=true"):
        validate(flex)
    with pytest.raises(ConfigError, match="checkpoint_every must be positive"):
        validate(_cfg(checkpoint_every=0))


def test_more_processes_per_node_than_gpus_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes on a one-GPU node stop before any CUDA call, naming the fix (on a GPU machine the
    second rank would otherwise fail deep in torch.cuda.set_device)."""
    from llmpipe.train.config import ParallelConfig
    from llmpipe.train.parallel import init_distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: pytest.fail("reached torch.cuda.set_device"))
    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(
        ConfigError, match=r"2 processes per node but 1 CUDA device\(s\).*parallel.device=cpu"
    ):
        init_distributed(ParallelConfig(device="auto"))


def test_cli_refuses_float8_on_cpu_in_one_line(
    byte_shards: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    from conftest import free_port
    from llmpipe.train.pretrain import main

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    args = ["--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml")]
    assert main([*args, "--out", str(tmp_path / "run"), "--parallel.float8=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: parallel.float8 needs a CUDA GPU") and "\n" not in err


def test_float8_converts_the_block_linears_only() -> None:
    from torchao.float8.float8_linear import Float8Linear

    cfg = ModelConfig(dim=64, n_layers=2, n_heads=4, vocab_size=300, max_seq_len=32)
    model = apply_float8(Transformer(cfg))
    linears = {n: type(m) for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert linears["output"] is nn.Linear
    blocks = {n: t for n, t in linears.items() if n.startswith("layers.")}
    assert len(blocks) == 2 * 7 and all(t is Float8Linear for t in blocks.values())
    assert {n for n, _ in model.named_parameters()} == {n for n, _ in Transformer(cfg).named_parameters()}


def test_selective_activation_checkpointing() -> None:
    """checkpoint_every=2 recomputes (enters again) blocks 0 and 2 in backward, not 1 and 3; the gradients are unchanged."""
    cfg = ModelConfig(dim=32, n_layers=4, n_heads=2, vocab_size=50, max_seq_len=16)
    plain = Transformer(cfg)
    plain.init_weights(seed=0)
    sac = copy.deepcopy(plain)
    sac.activation_checkpointing, sac.checkpoint_every = True, 2  # as apply_fsdp sets them from parallel.*
    calls = [0] * 4
    for i, block in enumerate(sac.layers):
        block.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    tokens = torch.randint(0, 50, (2, 16))
    grads = []
    for model in (plain, sac):
        model(tokens).square().mean().backward()
        grads.append([p.grad for p in model.parameters()])
    assert calls == [2, 1, 2, 1]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a)
