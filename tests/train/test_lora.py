"""LoRA and QLoRA fine-tuning of a HuggingFace Llama base (train/lora.py), checked against PEFT and torchao.

The base is a random LlamaForCausalLM saved by transformers with the byte-level tokenizer of the
Shakespeare shards; the adapters train on the shards through torchrun as a user runs it."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, read_metrics, torchrun, train_losses
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.errors import ConfigError
from llmpipe.train.byte_shards import byte_tokenizer_json
from llmpipe.train.checkpoint import SafeFileSystemReader
from llmpipe.train.config import load_config, validate
from llmpipe.train.lora import NF4Weight, is_adapter
from test_train_init_from import save_llama

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--model.doc_mask=false", "--data.batch_size=4",
    "--train.log_every=1", "--train.val_batches=2", "--optim.warmup_steps=2", "--metrics.tensorboard=false",
    "--lora.rank=4",
]  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_llama(tmp_path_factory.mktemp("lora") / "base", byte_tokenizer_json())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def val_loss(model: torch.nn.Module, shards: Path, ranks: int, batches: int = 2) -> float:
    """Mean loss of an HF model on the validation batches the trainer's ranks score."""
    loss, count = 0.0, 0
    for rank in range(ranks):
        loader = TokenLoader(
            ShardDataset(shards, "val"), 4, rank=rank, world_size=ranks, seed=0, infinite=False
        )
        for i, b in enumerate(loader):
            if i == batches:
                break
            with torch.no_grad():
                logits = model(b.input.long()).logits
            loss += float(F.cross_entropy(logits.flatten(0, 1), b.target.long().flatten(), reduction="sum"))
            count += int((b.target != -100).sum())
    return loss / count


def test_nf4_is_qlora_double_quantization_and_the_config_is_checked(tmp_path: Path) -> None:
    from torchao.quantization import NF4Tensor

    torch.manual_seed(0)
    w = torch.randn(256, 128) * 0.05  # 512 blocks of 64: two groups of 256 scales (torchao's sizes)
    ours = NF4Weight((256, 128))
    ours.quantize_(w)
    ref = NF4Tensor.from_tensor(w, 64, 256)
    assert torch.equal(ours.scales, ref.quantized_scalers)  # int8 scales after the mean is taken off
    assert torch.equal(ours.factors, ref.quantization_factor) and torch.equal(
        ours.mean, ref.scaler_mean[None]
    )
    codes = torch.stack([ours.codes >> 4, ours.codes & 15], 1).flatten()
    ref_codes = torch.stack([ref.quantized_data >> 4, ref.quantized_data & 15], 1).flatten()
    same = codes == ref_codes  # torchao rounds the levels to 4 decimals: a few ties go the other way
    assert same.float().mean() > 0.999
    deq, ref_deq = ours.dequantize().flatten(), ref.get_original_weight().flatten()
    torch.testing.assert_close(deq[same], ref_deq[same], atol=2e-5, rtol=0)
    assert 8 * ours.nbytes() / w.numel() == pytest.approx(4.128, abs=1e-3)  # 4 + 8/64 + 32/16384 bits
    odd = NF4Weight((7, 9))  # not a whole block: padded, read back exactly as long as it is
    odd.quantize_(w[:7, :9])
    assert (odd.dequantize() - w[:7, :9]).abs().max() <= 0.15 * w[:7, :9].abs().max()

    cfg = load_config(None, ["lora.rank=8", "lora.targets=[q_proj, v_proj]", f"model.init_from={tmp_path}"])
    validate(cfg)
    assert (cfg.lora.rank, cfg.lora.targets, cfg.lora.base_quant) == (8, ["q_proj", "v_proj"], "none")
    for bad, msg in [
        (["lora.ranks=8"], "unknown key"),
        (["lora.rank=8", "lora.base_quant=nf8"], "base_quant"),
        (["lora.rank=8"], "needs model.init_from"),
        (["lora.rank=8", f"model.init_from={tmp_path}", "lora.targets=[wq]"], "lora.targets"),
        (["lora.base_quant=nf4"], "needs lora.rank"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            validate(load_config(None, bad))


def test_lora_on_two_ranks_is_what_peft_loads(base: Path, byte_shards: Path, tmp_path: Path) -> None:
    """FSDP2 on 2 processes: the base frozen, only adapters checkpointed; PEFT loads the export and gives
    the trainer's losses and logits; the merged export is PEFT's merge_and_unload."""
    from llmpipe.cli import main
    from llmpipe.train.export_hf import load_run
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base_sha = sha256(base / "model.safetensors")
    run = tmp_path / "run"
    torchrun(
        2, "--data", str(byte_shards), "--out", str(run), *COMMON, f"--model.init_from={base}",
        "--parallel.mixed_precision=fp32", "--train.steps=8",
    )  # fmt: skip
    losses, metrics = train_losses(run), read_metrics(run)
    assert losses[8] < losses[1] - 0.3, losses
    # the trainable parameters are the adapters: rank x (in + out) per adapted layer
    shapes = [(64, 64), (64, 32), (64, 32), (64, 64), (64, 160), (64, 160), (160, 64)]
    assert next(r["lora_trainable_params"] for r in metrics if "lora_trainable_params" in r) == 2 * sum(
        4 * (i + o) for i, o in shapes
    )
    meta = SafeFileSystemReader(str(run / "checkpoints/step-00000008")).read_metadata()
    saved = [k.removeprefix("model.") for k in meta.state_dict_metadata if k.startswith("model.")]
    assert len(saved) == 2 * 2 * 7 and all(is_adapter(k) for k in saved)  # A and B, 7 layers, 2 blocks
    assert sha256(base / "model.safetensors") == base_sha

    assert main(["export", str(run), "--out", str(tmp_path / "adapter")]) == 0
    assert main(["export", str(run), "--merge", "--out", str(tmp_path / "merged")]) == 0
    hf_base = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    val = {r["step"]: r["val_loss"] for r in metrics if "val_loss" in r}
    assert val[0] == pytest.approx(val_loss(hf_base, byte_shards, 2), rel=1e-5)  # B = 0: the base at step 0
    ids = next(iter(TokenLoader(ShardDataset(byte_shards, "val"), 4, seed=0, dtype=torch.int64))).input
    with torch.no_grad():
        base_logits = hf_base(ids).logits
    peft = PeftModel.from_pretrained(hf_base, tmp_path / "adapter").eval()  # wraps hf_base in place
    # the trainer's last validation ran on its live model: PEFT on the untouched base gives the same loss
    assert val[8] == pytest.approx(val_loss(peft, byte_shards, 2), rel=1e-5)
    assert val[8] < val[0] - 0.3

    _, ours, _ = load_run(run, merge=False)
    with torch.no_grad():
        want = peft(ids).logits
        torch.testing.assert_close(ours(ids), want, atol=1e-4, rtol=0)
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32).eval()
        peft_merged = peft.merge_and_unload()
        torch.testing.assert_close(merged(ids).logits, peft_merged(ids).logits, atol=1e-4, rtol=0)
        assert (want - base_logits).abs().max() > 0.1  # the adapters changed the outputs


def test_qlora_nf4_base_trains_and_resumes_exactly(base: Path, byte_shards: Path, tmp_path: Path) -> None:
    """QLoRA (bf16, adapter dropout): the base held in NF4 (bytes measured in the run), the loss falls, a
    run stopped and resumed gives the uninterrupted run's losses, and another base is refused."""
    args = [
        "--data", str(byte_shards), *COMMON, f"--model.init_from={base}", "--lora.base_quant=nf4",
        "--lora.dropout=0.1", "--train.steps=6", "--checkpoint.every=3", "--train.val_every=0",
    ]  # fmt: skip
    full, cut = tmp_path / "full", tmp_path / "cut"
    torchrun(1, *args, "--out", str(full))
    reference = train_losses(full)
    assert reference[6] < reference[1] - 0.2, reference
    rec = next(r for r in read_metrics(full) if "base_nf4_bytes" in r)
    sizes = [64 * 64, 32 * 64, 32 * 64, 64 * 64, 160 * 64, 160 * 64, 64 * 160]
    blocks = [math.ceil(n / 64) for n in sizes]
    want = 2 * sum(n // 2 + b + 4 * math.ceil(b / 256) + 4 for n, b in zip(sizes, blocks, strict=True))
    assert rec["base_nf4_bytes"] == want and rec["base_nf4_weights"] == 2 * sum(sizes)
    assert rec["base_nf4_bits_per_weight"] < 4.2  # 16 in bf16

    proc = torchrun(1, *args, "--out", str(cut), "--debug.stop_after_step=4")
    assert "stopping as if killed" in proc.stdout
    proc = torchrun(1, *args, "--out", str(cut))
    assert "at step 3" in proc.stdout
    resumed = train_losses(cut)
    for step in range(4, 7):  # 4 again after the restart, from the checkpoint of step 3
        assert resumed[step] == reference[step], (step, resumed, reference)

    other = save_llama(tmp_path / "other", byte_tokenizer_json(), seed=1)
    args = [a if not a.startswith("--model.init_from=") else f"--model.init_from={other}" for a in args]
    proc = torchrun(1, *args, "--out", str(cut), "--train.steps=8", check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-3000:]
    assert "holds adapters of the base" in errors[0] and str(base) in errors[0] and str(other) in errors[0]
