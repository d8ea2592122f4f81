"""`llmpipe plan`: the textbook sums, and the estimate against the memory the trainer's model really uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from llmpipe.plan import ModelShape, PlanInput, estimate


def _plan(*args: str) -> dict:
    return json.loads(run_cli("plan", *args, "--json").stdout)


def test_one_billion_parameters_in_fp32_bf16_and_zero3() -> None:
    fp32 = _plan("--params", "1B", "--precision", "fp32")
    assert fp32["memory_gb"]["weights"] == pytest.approx(4.0)
    assert fp32["total_gb"] == pytest.approx(24.0)  # ~6 x the weights to train with Adam
    bf16 = _plan("--params", "1B", "--precision", "bf16")
    assert bf16["memory_gb"]["weights"] == pytest.approx(2.0)
    one = _plan("--params", "1B", "--strategy", "ddp")
    z3 = _plan("--params", "1B", "--strategy", "zero3", "--gpus", "64")
    for k in ("weights", "gradients", "optimizer_states"):
        assert z3["memory_gb"][k] == pytest.approx(one["memory_gb"][k] / 64)
    z1 = _plan("--params", "1B", "--strategy", "zero1", "--gpus", "8")
    assert z1["memory_gb"]["weights"] == pytest.approx(one["memory_gb"]["weights"])
    assert z1["memory_gb"]["optimizer_states"] == pytest.approx(one["memory_gb"]["optimizer_states"] / 8)
    hybrid = _plan("--params", "1B", "--strategy", "fsdp_hybrid", "--gpus", "16", "--shard-size", "8")
    assert hybrid["shard_factor"] == 8


def test_compute_and_data_budgets(tmp_path: Path) -> None:
    p = _plan("--params", "1B", "--gpu", "a100", "--mfu", "0.5")
    assert p["compute_optimal_tokens"] == pytest.approx(20e9)
    assert p["train_flops"] == pytest.approx(6 * 1e9 * 20e9)
    assert p["petaflop_s_days"] == pytest.approx(1.2e20 / (1e15 * 86400))
    assert p["gpu_hours"] == pytest.approx(1.2e20 / (312e12 * 0.5) / 3600)
    assert p["raw_tokens_to_crawl"] == pytest.approx(20e9 / 0.02)
    (tmp_path / "stats.json").write_text(json.dumps({"retention": {"word_fraction": 0.05}}))
    q = _plan("--params", "1B", "--tokens", "1T", "--from-curation", str(tmp_path))
    assert q["raw_tokens_to_crawl"] == pytest.approx(1e12 / 0.05)
    for bad, says in (
        ("{x", "stats.json: not valid JSON"),
        ("[]", "stats.json: not a curate stats file"),
        ('{"retention": []}', "retention.word_fraction is None, not a number"),
        ('{"retention": {"word_fraction": "0.05"}}', "retention.word_fraction is '0.05', not a number"),
        ('{"retention": {"word_fraction": 1.5}}', "retention 1.5 is not in (0, 1]"),
    ):
        (tmp_path / "stats.json").write_text(bad)
        p = run_cli("plan", "--params", "1B", "--from-curation", str(tmp_path), check=False)
        err = p.stderr.strip()
        assert p.returncode == 2 and len(err.splitlines()) == 1 and says in err, (bad, err)
    off = _plan("--params", "7B", "--cpu-offload")
    assert off["memory_gb"]["optimizer_states"] == 0 and off["cpu_offload_gb"] > 0


def test_fit_and_largest_micro_batch() -> None:
    shape = ModelShape.llama(2048, 16, 16, 32000)
    base = PlanInput(model=shape, gpu_memory_gb=24, seq_len=2048, micro_batch=1, strategy="ddp")
    plan = estimate(base)
    assert plan.max_micro_batch is not None and plan.fits == (plan.max_micro_batch >= 1)
    bigger = estimate(PlanInput(**{**base.__dict__, "micro_batch": plan.max_micro_batch + 1}))
    assert not bigger.fits
    if plan.max_micro_batch >= 1:
        assert estimate(PlanInput(**{**base.__dict__, "micro_batch": plan.max_micro_batch})).fits
    ckpt = estimate(PlanInput(**{**base.__dict__, "activation_checkpointing": True}))
    assert ckpt.memory_gb["activations"] < plan.memory_gb["activations"] / 3
    assert ckpt.max_micro_batch is not None and ckpt.max_micro_batch > 2 * plan.max_micro_batch


def test_parameter_count_matches_the_trainer_model() -> None:
    import torch
    from llmpipe.train.model import ModelConfig, Transformer

    for kw in (
        {"dim": 64, "n_layers": 2, "n_heads": 4},
        {"dim": 96, "n_layers": 3, "n_heads": 6, "n_kv_heads": 2},
    ):
        cfg = ModelConfig(**kw, vocab_size=1000, max_seq_len=32)  # type: ignore[arg-type]
        with torch.device("meta"):
            model = Transformer(cfg)
        real = sum(p.numel() for p in model.parameters())
        est = ModelShape.llama(
            kw["dim"], kw["n_layers"], kw["n_heads"], 1000, n_kv_heads=kw.get("n_kv_heads")
        )
        assert est.params == real


@pytest.mark.parametrize(
    ("config", "vocab", "seq_len", "batch", "fused"),
    [
        ("tiny.yaml", 512, 64, 8, False),
        ("gpt2-124m.yaml", 50257, 128, 2, False),
        ("gpt2-124m.yaml", 50257, 1024, 2, True),  # model.fused_loss: no logits (train/loss.py)
    ],
)
def test_memory_estimate_within_20_percent_of_the_measured_peak(
    config: str, vocab: int, seq_len: int, batch: int, fused: bool
) -> None:
    """One training step of the trainer's model and optimizer under torch's MemTracker (CPU, fp32)."""
    import torch
    from llmpipe.train.config import load_config
    from llmpipe.train.loss import output_cross_entropy
    from llmpipe.train.model import Transformer
    from torch.distributed._tools.mem_tracker import MemTracker

    path = ROOT / "configs" / "train" / config
    cfg = load_config(path, [f"--model.vocab_size={vocab}", f"--model.max_seq_len={seq_len}"][:0]).model
    cfg.vocab_size, cfg.max_seq_len = vocab, seq_len
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device="cpu")
    model.init_weights()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, vocab, (batch, seq_len))
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(2):  # the second step has the optimizer states
            if fused:
                loss = output_cross_entropy(model, model(x, return_hidden=True), x)
                logits = None
            else:
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            del logits, loss
            tracker.reset_mod_stats()
    measured = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    shape = ModelShape.of(cfg)
    plan = estimate(
        PlanInput(
            model=shape,
            precision="fp32",
            strategy="ddp",
            seq_len=seq_len,
            micro_batch=batch,
            device="cpu",
            fused_loss=fused,
        )
    )
    est = plan.total_gb * 1e9
    print(
        config,
        seq_len,
        "fused" if fused else "",
        f"planned {est / 1e9:.3f} GB, measured {measured / 1e9:.3f} GB",
    )
    assert abs(est - measured) / measured < 0.20, (config, est, measured)


def test_config_is_the_trainers_typed_config(tmp_path: Path) -> None:
    """`plan --config` reads train/config.py's RunConfig: its defaults, its checks, its unknown keys."""
    from llmpipe.train.model import ModelConfig

    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "model:\n  dim: 96\n  n_heads: 6\n  n_kv_heads: 2\n  vocab_size: 1000\n  max_seq_len: 64\n"
    )
    p = _plan("--config", str(cfg), "--micro-batch", "2")
    m = ModelConfig(dim=96, n_heads=6, n_kv_heads=2, vocab_size=1000)  # n_layers etc.: the trainer's defaults
    assert p["params"] == ModelShape.of(m).params
    assert p["inputs"]["seq_len"] == 64
    assert _plan("--config", str(cfg), "--vocab-size", "2000")["params"] > p["params"]

    cfg.write_text("model:\n  dim: 96\n  n_head: 6\n")
    bad = run_cli("plan", "--config", str(cfg), check=False)
    assert bad.returncode != 0 and "n_head" in bad.stderr and "Traceback" not in bad.stderr
    cfg.write_text("train:\n  steps: many\n")
    bad = run_cli("plan", "--config", str(cfg), check=False)
    assert bad.returncode != 0 and "train.steps" in bad.stderr and "Traceback" not in bad.stderr


def test_tensor_and_pipeline_layouts() -> None:
    """tp and pp divide the model states; the pipeline bubble is (pp - 1) / (m + pp - 1), interleaving
    shortens it v times; communication per step appears for each parallel dimension in use."""
    cfg = ["--config", str(ROOT / "configs/train/llama-1b.yaml"), "--seq-len", "2048", "--micro-batch", "8"]
    one = _plan(*cfg, "--gpus", "8")
    tp = _plan(*cfg, "--gpus", "8", "--tp", "2")
    assert tp["layout"] == {"dp_replicate": 1, "dp_shard": 4, "cp": 1, "pp": 1, "tp": 2}
    assert tp["memory_gb"]["weights"] == pytest.approx(one["memory_gb"]["weights"])  # 1/8 either way
    assert tp["memory_gb"]["activations"] < one["memory_gb"]["activations"] / 1.5
    assert tp["comm_gb"]["tp"] > 0 and one["comm_gb"]["tp"] == 0
    gpipe = _plan(*cfg, "--gpus", "4", "--pp", "4", "--microbatches", "8", "--pp-schedule", "gpipe")
    assert gpipe["bubble_fraction"] == pytest.approx(3 / 11)
    inter = _plan(
        *cfg, "--gpus", "4", "--pp", "4", "--microbatches", "8", "--pp-schedule", "interleaved_1f1b"
    )
    assert inter["bubble_fraction"] == pytest.approx(3 / 19)
    f1b = _plan(*cfg, "--gpus", "4", "--pp", "4", "--microbatches", "8", "--pp-schedule", "1f1b")
    assert f1b["memory_gb"]["activations"] < gpipe["memory_gb"]["activations"]  # 4 in flight, not 8
    assert f1b["comm_gb"]["pp"] > 0 and f1b["comm_gb"]["fsdp"] == 0  # one rank per stage: nothing to shard
    text = run_cli("plan", *cfg, "--gpus", "4", "--pp", "4").stdout
    assert "bubble" in text and "communication per GPU per step" in text
    # context parallel: half of each sequence per rank, the model states sharded over dp x cp, the
    # gathered K/V kept by attention, and their all-gather / reduce-scatter as communication
    cp = _plan(*cfg, "--gpus", "8", "--cp", "2")
    assert cp["layout"] == {"dp_replicate": 1, "dp_shard": 4, "cp": 2, "pp": 1, "tp": 1}
    assert cp["memory_gb"]["weights"] == pytest.approx(one["memory_gb"]["weights"])
    assert (
        one["memory_gb"]["activations"] / 2
        < cp["memory_gb"]["activations"]
        < one["memory_gb"]["activations"] / 1.5
    )
    assert cp["comm_gb"]["cp"] > 0 and one["comm_gb"]["cp"] == 0
    assert cp["comm_gb"]["tp"] == tp["comm_gb"]["cp"] == 0
    bad = run_cli("plan", *cfg, "--gpus", "6", "--tp", "4", check=False)
    assert bad.returncode != 0 and "tp 4 x pp 1 does not divide the 6 GPUs" in bad.stderr
    assert "Traceback" not in bad.stderr
