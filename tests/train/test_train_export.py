"""A trained run (a few hundred steps on real text): validation loss falls, the HF export loads in
transformers with the trainer's logits, and generate.py samples from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, read_metrics, torchrun

from train.export_hf import load_run


@pytest.fixture(scope="module")
def trained_run(byte_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    torchrun(
        2, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
        "--train.steps=300", "--train.log_every=50", "--train.val_every=100", "--train.val_batches=8",
        "--data.batch_size=4", "--checkpoint.every=100", "--model.n_kv_heads=2", "--model.tie_embeddings=true",
        timeout=600,
    )  # fmt: skip
    return run


def test_validation_loss_falls_over_a_few_hundred_steps(trained_run: Path) -> None:
    vals = [(r["step"], r["val_loss"]) for r in read_metrics(trained_run) if "val_loss" in r]
    assert [s for s, _ in vals] == [0, 100, 200, 300]
    start, end = vals[0][1], vals[-1][1]
    assert start > 5.0  # uniform over 257 byte ids: ln 257 = 5.55
    assert end < 0.55 * start, vals  # well below: the model has learned English spelling
    assert vals[1][1] > end


def test_export_loads_in_transformers_with_the_same_logits(trained_run: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    hf_dir = tmp_path / "hf"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train/export_hf.py"), str(trained_run), "--out", str(hf_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in hf_dir.iterdir()) == [
        "config.json", "llmpipe_export.json", "model.safetensors", "tokenizer.json",
    ]  # fmt: skip
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_key_value_heads"] == 2
    hf = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    _, ours, _ = load_run(trained_run)
    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    text = "ROMEO:\nBut soft, what light through yonder window breaks?"
    ids = torch.tensor([tok.encode(text).ids])
    assert ids.shape[1] == len(text.encode())  # the byte-level tokenizer of the shards
    with torch.no_grad():
        want = ours(ids)
        got = hf(ids).logits
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # the trained model predicts this text far better than chance, in both implementations
    loss = torch.nn.functional.cross_entropy(got[0, :-1], ids[0, 1:])
    assert float(loss) < 3.0


def test_generate_samples_text(trained_run: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train/generate.py"), str(trained_run), "--prompt", "KING",
         "--max-new-tokens", "40", "--temperature", "0.5"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("KING") and len(out) > 20
    letters = sum(c.isalpha() or c.isspace() for c in out)
    assert letters > 0.8 * len(out)  # English-like bytes, not noise
