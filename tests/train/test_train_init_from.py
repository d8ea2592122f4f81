"""Continued pretraining from a HuggingFace Llama checkpoint: transformers' logits at step 0, the shards'
tokenizer checked against the checkpoint's. The checkpoint is a random LlamaForCausalLM built and saved by
transformers itself, with a tokenizer saved by transformers (other bytes, the same tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import ROOT, read_metrics, torchrun
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.errors import LlmpipeError
from llmpipe.train.byte_shards import byte_tokenizer_json
from llmpipe.train.hf import load_weights
from llmpipe.train.init_from import check_tokenizer, prepare
from llmpipe.train.model import ModelConfig, Transformer


def save_llama(out: Path, tokenizer_json: str, *, seed: int = 0) -> Path:
    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=257, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False, initializer_range=0.1,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer_json)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_llama(tmp_path_factory.mktemp("hf") / "llama", byte_tokenizer_json())


def hf_model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()


def test_loaded_model_gives_transformers_logits(hf_dir: Path, byte_shards: Path) -> None:
    cfg = ModelConfig(init_from=str(hf_dir))
    prepare(cfg, byte_shards)
    assert (cfg.dim, cfg.n_layers, cfg.kv_heads, cfg.hidden, cfg.vocab_size) == (64, 2, 2, 160, 257)
    cfg.max_seq_len = 64
    ours = Transformer(cfg)
    ours.init_weights(seed=1)
    load_weights(ours, hf_dir)
    ours.eval()
    ids = next(iter(TokenLoader(ShardDataset(byte_shards, "val"), 4, seed=0, dtype=torch.int64))).input
    with torch.no_grad():
        want = hf_model(hf_dir)(ids).logits
        got = ours(ids)
    assert want.abs().max() > 0.5  # not a near-constant output
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_step_0_of_a_continued_run_is_the_checkpoint(hf_dir: Path, byte_shards: Path, tmp_path: Path) -> None:
    """Through torchrun: the validation loss at step 0 is transformers' loss on the same val batches."""
    run = tmp_path / "cont"
    proc = torchrun(
        1, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
        f"--model.init_from={hf_dir}", "--model.doc_mask=false", "--parallel.mixed_precision=fp32",
        "--train.steps=2", "--train.val_batches=2", "--data.batch_size=4", "--metrics.tensorboard=false",
    )  # fmt: skip
    assert "(a fresh optimizer)" in proc.stdout
    val0 = next(r["val_loss"] for r in read_metrics(run) if "val_loss" in r and r["step"] == 0)
    hf = hf_model(hf_dir)
    loss, count = 0.0, 0
    for i, b in enumerate(TokenLoader(ShardDataset(byte_shards, "val"), 4, seed=0, infinite=False)):
        if i == 2:
            break
        with torch.no_grad():
            logits = hf(b.input.long()).logits
        loss += float(
            torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), b.target.long().flatten(), reduction="sum"
            )
        )
        count += int((b.target != -100).sum())
    assert val0 == pytest.approx(loss / count, rel=1e-5)


def test_a_checkpoint_of_another_tokenizer_is_refused(byte_shards: Path, tmp_path: Path) -> None:
    other = json.loads(byte_tokenizer_json())
    vocab = other["model"]["vocab"]
    a, b = next(iter(vocab)), list(vocab)[1]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two ids swapped: same size, other ids
    hf = save_llama(tmp_path / "other", json.dumps(other))
    with pytest.raises(LlmpipeError, match="another tokenizer than the checkpoint"):
        check_tokenizer(byte_shards, hf)
    proc = torchrun(
        1, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"),
        "--out", str(tmp_path / "run"), f"--model.init_from={hf}", check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(byte_shards) in errors[0] and str(hf) in errors[0]
    assert "init_from.py" not in proc.stderr  # no traceback of the trainer's (torchrun reports the exit)
