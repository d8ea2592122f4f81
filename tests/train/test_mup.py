"""muP as a model option: off by default (standard parametrisation unchanged), identical to it at the base
width, a coordinate check on real text (activation updates stay flat across widths under muP and grow
without it), per-layer learning rates, and an HF export that folds muP's multipliers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from llmpipe.data import ShardDataset
from llmpipe.train.config import OptimConfig, RunConfig
from llmpipe.train.coord_check import coord_check, sample_tokens
from llmpipe.train.hf import hf_config, hf_state_dict
from llmpipe.train.model import ModelConfig, Transformer
from llmpipe.train.optim import param_groups

WIDTHS = [64, 128, 256]


def _model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    m = Transformer(cfg)
    m.init_weights(seed)
    return m


@pytest.fixture(scope="module")
def tokens(byte_shards: Path) -> tuple[torch.Tensor, int]:
    return sample_tokens(byte_shards, 8, 32)


def test_mup_at_the_base_width_is_the_standard_model(tokens: tuple[torch.Tensor, int]) -> None:
    t, vocab = tokens
    sp = ModelConfig(dim=64, n_layers=2, n_heads=4, vocab_size=vocab, max_seq_len=32)
    assert sp.mup_base_dim == 0 and sp.width_mult == 1.0 and sp.attn_scale is None
    mup = replace(sp, mup_base_dim=64)
    with torch.no_grad():
        torch.testing.assert_close(_model(mup)(t[:, :-1]), _model(sp)(t[:, :-1]), rtol=1e-5, atol=1e-5)
    assert len(param_groups(_model(mup), OptimConfig())) == 2  # no extra group at width multiplier 1


def test_mup_scales_init_attention_output_and_hidden_learning_rates(tokens: tuple[torch.Tensor, int]) -> None:
    _, vocab = tokens
    cfg = ModelConfig(dim=256, n_layers=2, n_heads=4, vocab_size=vocab, max_seq_len=32, mup_base_dim=64)
    assert cfg.width_mult == 4.0
    assert cfg.attn_scale == pytest.approx(4.0 / 64)  # sqrt(base head_dim 16) / head_dim 64
    m = _model(cfg)
    assert m.layers[0].attn.wq.weight.std().item() == pytest.approx(0.02 / 2, rel=0.05)  # std / sqrt(4)
    assert m.tok_embeddings.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.output.weight.std().item() == pytest.approx(0.02, rel=0.05)
    groups = param_groups(m, OptimConfig(lr=1e-2))
    hidden = [g for g in groups if "lr" in g]
    assert len(hidden) == 1 and hidden[0]["lr"] == pytest.approx(1e-2 / 4)
    n_hidden = sum(p.numel() for p in hidden[0]["params"])  # type: ignore[attr-defined]
    assert n_hidden == sum(
        p.numel() for n, p in m.named_parameters() if n.startswith("layers.") and p.ndim == 2
    )
    with pytest.raises(ValueError, match="mup_base_dim"):
        ModelConfig(dim=64, n_heads=4, mup_base_dim=30)


def test_coordinate_check(tokens: tuple[torch.Tensor, int]) -> None:
    t, vocab = tokens
    base = ModelConfig(dim=WIDTHS[0], n_layers=2, n_heads=4, vocab_size=vocab, max_seq_len=32)
    sp = coord_check(base, WIDTHS, t, mup=False, steps=3, lr=1e-2)
    mup = coord_check(base, WIDTHS, t, mup=True, steps=3, lr=1e-2)
    for key in ("logits", "hidden"):
        flat = [mup[w][key] for w in WIDTHS]
        assert max(flat) / min(flat) < 2.0, (key, mup)  # muP: the update's size does not grow with width
    grow = [sp[w]["logits"] for w in WIDTHS]
    assert grow[0] < grow[1] < grow[2] and grow[2] / grow[0] > 2.0, sp  # SP: it grows with the width
    assert sp[WIDTHS[-1]]["hidden"] / sp[WIDTHS[0]]["hidden"] > 5.0, sp


def test_hf_export_folds_the_mup_multipliers(tokens: tuple[torch.Tensor, int], byte_shards: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    t, vocab = tokens
    cfg = RunConfig()
    cfg.model = ModelConfig(dim=128, n_layers=2, n_heads=4, vocab_size=vocab, max_seq_len=32, mup_base_dim=64)
    cfg.data.path = byte_shards
    ours = _model(cfg.model, seed=3).eval()
    hf_cfg = {
        k: v for k, v in hf_config(cfg.model, ShardDataset(byte_shards, "train").vocab_size - 1).items()
    }
    hf = LlamaForCausalLM(LlamaConfig(**hf_cfg)).eval()
    hf.load_state_dict(hf_state_dict(ours), strict=False)
    with torch.no_grad():
        torch.testing.assert_close(hf(t[:, :-1]).logits, ours(t[:, :-1]), rtol=1e-4, atol=1e-4)
