"""Mixture of experts (train/moe.py): a tiny MoE trains under real torchrun; expert parallelism over 2
gloo processes gives the 1-process losses; a checkpoint resumes exactly at another ep; routing statistics
reach metrics.jsonl; the HF export (MixtralForCausalLM, Qwen2MoeForCausalLM) gives the trainer's logits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, read_metrics, torchrun, train_losses
from llmpipe.errors import ConfigError, InputError
from llmpipe.train.config import load_config
from llmpipe.train.model import ModelConfig, Transformer
from llmpipe.train.moe import MoE, MoEConfig, expert_ffn
from llmpipe.train.parallel import resolve_layout

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--train.steps=10", "--train.log_every=1",
    "--train.val_every=0", "--checkpoint.every=5", "--parallel.mixed_precision=fp32",
    "--metrics.tensorboard=false", "--model.moe.experts=4", "--model.moe.top_k=2",
]  # fmt: skip
# DeepSeek-V3 bias balancing, a capacity that drops tokens, a shared expert, a dense first block
SPARSE = ["--model.moe.balance=bias", "--model.moe.bias_update_rate=0.01", "--model.moe.capacity_factor=1.0",
          "--model.moe.shared_experts=1", "--model.moe.layers=[1]", "--train.grad_accum=2"]  # fmt: skip
BATCH, SEQ = 8, 64  # sequences per step over all ranks; the byte shards' sequence length


def train(n: int, run: Path, shards: Path, *extra: str) -> dict[int, float]:
    torchrun(n, "--data", str(shards), "--out", str(run), *COMMON, f"--data.batch_size={BATCH // n}", *extra)
    return train_losses(run)


def assert_close(got: dict[int, float], want: dict[int, float], what: str) -> None:
    assert sorted(got) == sorted(want), (what, got, want)
    for step, loss in want.items():
        assert abs(got[step] - loss) <= 1e-5 * loss, (what, step, got[step], loss)


def routing(run: Path) -> list[dict]:
    return [r for r in read_metrics(run) if "moe_tokens_per_expert" in r]


def test_moe_trains_ep2_matches_and_exports_to_mixtral(byte_shards: Path, tmp_path: Path) -> None:
    one = train(1, tmp_path / "ep1", byte_shards)
    assert one[10] < one[1] - 0.5, one  # it learns
    stats = routing(tmp_path / "ep1")
    assert [r["step"] for r in stats] == list(range(1, 11))
    for r in stats:  # every assignment of the step is counted: sequences x tokens x top_k per layer
        assert [sum(layer) for layer in r["moe_tokens_per_expert"]] == [BATCH * SEQ * 2] * 2, r
        assert r["moe_dropped_frac"] == 0 and r["moe_imbalance"] >= 1 and r["moe_aux_loss"] > 0.9

    two = train(2, tmp_path / "ep2", byte_shards, "--parallel.ep=2")
    assert_close(two, one, "ep=2 on 2 processes")
    assert [r["moe_tokens_per_expert"] for r in routing(tmp_path / "ep2")] == [
        r["moe_tokens_per_expert"] for r in stats
    ]

    from llmpipe.cli import main
    from llmpipe.train.export_hf import load_run
    from transformers import AutoModelForCausalLM

    out = tmp_path / "hf"
    assert main(["export", str(tmp_path / "ep2"), "--out", str(out)]) == 0  # written at ep=2
    assert json.loads((out / "config.json").read_text())["architectures"] == ["MixtralForCausalLM"]
    _, ours, _ = load_run(tmp_path / "ep2")
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.randint(0, 256, (2, SEQ), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = ours(ids), hf(ids).logits
    assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max())


def test_moe_bias_capacity_shared_resume_across_ep(byte_shards: Path, tmp_path: Path) -> None:
    """Bias balancing, dropped tokens, a shared expert and a dense block on 1 process; its step-5
    checkpoint (the biases in it) resumed at ep=2 on 2 processes, with activation checkpointing (the
    experts' forward and all-to-all recomputed in the backward), continues with the same losses."""
    ref = tmp_path / "ep1"
    one = train(1, ref, byte_shards, *SPARSE)
    stats = routing(ref)
    assert all(len(r["moe_tokens_per_expert"]) == 1 for r in stats)  # only block 1 is MoE
    # capacity 1.0 with top 2 of 4: at most half the assignments drop (all routed to two experts)
    assert all(0 < r["moe_dropped_frac"] <= 0.5 for r in stats), stats
    assert stats[-1]["moe_bias_absmax"] > 0  # the biases moved toward balance

    cut = tmp_path / "ep2"
    shutil.copytree(ref / "checkpoints" / "step-00000005", cut / "checkpoints" / "step-00000005")
    proc = torchrun(
        2, "--data", str(byte_shards), "--out", str(cut), *COMMON, *SPARSE, "--data.batch_size=4",
        "--parallel.ep=2", "--parallel.activation_checkpointing=true",
    )  # fmt: skip
    assert "at step 5" in proc.stdout
    resumed = train_losses(cut)
    assert_close(resumed, {s: loss for s, loss in one.items() if s > 5}, "resumed at ep=2")
    assert [r["moe_bias_absmax"] for r in routing(cut)] == pytest.approx(
        [r["moe_bias_absmax"] for r in stats[5:]], rel=1e-6
    )

    from llmpipe.cli import main

    assert main(["export", str(cut), "--out", str(tmp_path / "hf")]) == 2  # no HF class has the bias


def test_grouped_matmul_equals_loop_and_capacity_drops() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(50, 16, generator=gen, requires_grad=True)
    ws = [torch.randn(4, 24, 16, generator=gen), torch.randn(4, 24, 16, generator=gen),
          torch.randn(4, 16, 24, generator=gen)]  # fmt: skip
    for w in ws:
        w.requires_grad_()
    counts = [20, 0, 13, 17]  # an expert without tokens too
    outs, grads = [], []
    for grouped in (True, False):
        y = expert_ffn(x, counts, *ws, grouped=grouped)
        outs.append(y.detach())
        grads.append(torch.autograd.grad((y * y).sum(), [x, *ws]))
    assert torch.equal(outs[0], outs[1])
    for a, b in zip(grads[0], grads[1], strict=True):
        assert float((a - b).abs().max()) <= 1e-5 * float(b.abs().max())

    moe = MoE(16, 24, MoEConfig(experts=4, top_k=2, capacity_factor=1.0))
    with torch.no_grad():
        for p in (moe.w1, moe.w3, moe.w2):
            p.normal_(0, 0.1, generator=gen)
        moe.router.weight.zero_()
        moe.router.weight[0], moe.router.weight[1] = 1.0, 0.5  # experts 0 and 1 for every token
    xs = torch.rand(3, 10, 16, generator=gen) + 0.1
    moe.train()
    y = moe(xs)
    # each sequence: 10 tokens x 2 choices, capacity ceil(1.0 * 20 / 4) = 5 per expert: 10 of 20 dropped
    assert moe.stats.load is not None and moe.stats.load.tolist() == [30, 30, 0, 0]
    assert moe.stats.assigned == 60 and float(moe.stats.dropped) == 30
    assert bool((y[:, 5:] == 0).all()) and bool((y[:, :5] != 0).all())  # the later tokens were dropped
    moe.eval()
    assert bool((moe(xs)[:, 5:] != 0).all())  # evaluation is dropless


def test_moe_config_and_layout_checks() -> None:
    cfg = load_config("tiny", ["model.moe.experts=8", "model.moe.top_k=2", "model.moe.layers=[0]"])
    assert cfg.model.moe == MoEConfig(experts=8, top_k=2, layers=[0])
    with pytest.raises(ConfigError, match="unknown key"):
        load_config("tiny", ["model.moe.expert=8"])
    with pytest.raises(ConfigError, match="top_k"):
        load_config("tiny", ["model.moe.experts=2", "model.moe.top_k=3"])
    with pytest.raises(ConfigError, match="block index"):
        load_config("tiny", ["model.moe.experts=2", "model.moe.layers=[5]"])
    cfg = load_config("tiny", ["model.moe.experts=6", "parallel.ep=4"])
    with pytest.raises(ConfigError, match="must divide model.moe.experts"):
        resolve_layout(cfg.parallel, 4, cfg.model)
    cfg = load_config("tiny", ["model.moe.experts=4", "parallel.ep=2", "parallel.tp=2"])
    with pytest.raises(ConfigError, match="tp=1"):
        resolve_layout(cfg.parallel, 4, cfg.model)


def test_qwen2_moe_export_logits(tmp_path: Path) -> None:
    """Shared experts and dense blocks export as Qwen2MoeForCausalLM with the trainer's logits."""
    from llmpipe.train.export_hf import save_weights
    from llmpipe.train.hf import hf_config, hf_state_dict
    from transformers import AutoModelForCausalLM

    moe = MoEConfig(experts=4, top_k=2, shared_experts=2, layers=[1, 2], expert_hidden=48)
    m = ModelConfig(dim=64, n_layers=3, n_heads=4, n_kv_heads=2, vocab_size=257, max_seq_len=32, moe=moe)
    model = Transformer(m)
    model.init_weights(seed=1)
    model.eval()
    save_weights(hf_state_dict(model), tmp_path, None)
    (tmp_path / "config.json").write_text(json.dumps(hf_config(m, 256)))
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(hf).__name__ == "Qwen2MoeForCausalLM"
    ids = torch.randint(0, 257, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = model(ids), hf(ids).logits
    assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max())
    m.moe.balance = "bias"
    with pytest.raises(InputError, match="selection bias"):
        hf_config(m, 256)


def test_plan_counts_moe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`llmpipe plan` on a MoE config: total and active parameters as the trainer's model counts them,
    FLOPs per token from the active ones, the expert all-to-all volume, experts split over ep ranks."""
    from llmpipe.cli import main
    from llmpipe.plan import ModelShape, PlanInput, estimate
    from llmpipe.train.model import count_params
    from llmpipe.train.moe import inactive_params

    moe = MoEConfig(experts=8, top_k=2, shared_experts=1, layers=[1, 2], expert_hidden=48)
    m = ModelConfig(dim=64, n_layers=3, n_heads=4, vocab_size=257, max_seq_len=32, moe=moe)
    with torch.device("meta"):
        model = Transformer(m)
    shape = ModelShape.of(m)
    assert shape.params == count_params(model)
    assert shape.active == count_params(model) - inactive_params(model) < shape.params
    one, four = (estimate(PlanInput(model=shape, gpus=4, seq_len=32, micro_batch=2, ep=ep)) for ep in (1, 4))
    assert one.flops_per_token == four.flops_per_token == 6 * shape.active + 12 * 3 * 64 * 32
    assert "all_to_all" not in one.comm_gb
    # 2 MoE blocks x top 2 copies of 32 x 2 tokens x 64 dims x 2 bytes, out and back, forward and backward
    assert four.comm_gb["all_to_all"] * 1e9 == pytest.approx(4 * 2 * 2 * 32 * 2 * 64 * 2 * 3 / 4)
    ex = shape.expert_params
    assert (one.memory_gb["weights"] - four.memory_gb["weights"]) * 1e9 == pytest.approx(0.0)  # ep = dp_shard
    eight = estimate(PlanInput(model=shape, gpus=8, seq_len=32, micro_batch=2, ep=2))
    assert eight.memory_gb["weights"] * 1e9 == pytest.approx(((shape.params - ex) / 8 + ex / 2) * 2)
    cfg = tmp_path / "moe.yaml"
    cfg.write_text("model: {dim: 64, n_layers: 2, n_heads: 4, moe: {experts: 8, top_k: 2}}\n")
    assert main(["plan", "--config", str(cfg), "--gpus", "2", "--ep", "2", "--seq-len", "64",
                 "--micro-batch", "4", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["active_params"] < out["params"] and out["comm_gb"]["all_to_all"] > 0
