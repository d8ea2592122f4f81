"""A trained run (a few hundred steps on real text): validation loss falls, the HF export loads in
transformers with the trainer's logits, and generate.py samples from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, read_metrics
from llmpipe.train.export_hf import load_run


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
        "config.json", "generation_config.json", "llmpipe_export.json", "model.safetensors",
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
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


def test_a_failed_export_leaves_the_last_one_and_no_partial_model(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the weights are written: the export before stays as it was, and the
    half-written model is removed (it is written beside --out, then renamed over it)."""
    import errno

    from llmpipe.train import export_hf

    out = tmp_path / "hf"
    export_hf.export(trained_run, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(weights: dict[str, torch.Tensor], directory: Path, max_shard_size: object) -> None:
        (directory / "model.safetensors").write_bytes(b"\0" * 1000)  # part of it, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_hf, "save_weights", disk_full)
    with pytest.raises(OSError, match="No space left"):
        export_hf.export(trained_run, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no .hf.tmp-PID left
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_generate_samples_text(trained_run: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "llmpipe.train.generate", str(trained_run), "--prompt", "KING",
         "--max-new-tokens", "40", "--temperature", "0.5"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("KING") and len(out) > 20
    letters = sum(c.isalpha() or c.isspace() for c in out)
    assert letters > 0.8 * len(out)  # English-like bytes, not noise
    for bad, says in (
        (["--max-new-tokens", "-5"], "--max-new-tokens: must be >= 1, got -5"),
        (["--temperature", "nan"], "--temperature: must be a finite number >= 0, got nan"),
        (["--top-k", "-1"], "--top-k: must be >= 0, got -1"),
    ):
        p = subprocess.run([sys.executable, "-m", "llmpipe.train.generate", str(trained_run), *bad],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (bad, p.stderr)


WEB = "web/cc-en-head-0091.jsonl"


def test_autotokenizer_gives_llmpipes_ids_without_a_bos(
    hf_export: Path, data_dir: Path, tmp_path: Path
) -> None:
    """The run's export, and the tokenizer files for a BPE tokenizer trained by llmpipe on real text:
    AutoTokenizer encodes as llmpipe does (no BOS of its own, nothing outside the vocabulary)."""
    from llmpipe.eval import read_texts
    from llmpipe.tokenizer import Tokenizer as LlmpipeTokenizer
    from llmpipe.train.export_hf import tokenizer_files
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    texts = read_texts(data_dir / WEB)
    hf = AutoTokenizer.from_pretrained(hf_export)
    assert type(hf) is PreTrainedTokenizerFast
    ours = Tokenizer.from_file(str(hf_export / "tokenizer.json"))
    assert hf.eos_token_id == hf.bos_token_id == hf.pad_token_id == 256
    for t in texts:
        assert hf(t).input_ids == ours.encode(t, add_special_tokens=False).ids
        assert max(hf(t).input_ids) < 257
    gen = json.loads((hf_export / "generation_config.json").read_text())
    assert gen == {"bos_token_id": 256, "eos_token_id": 256, "pad_token_id": 256}
    # a real BPE vocabulary, trained by llmpipe
    bpe = LlmpipeTokenizer.train_from_texts(texts, 600)
    d = tmp_path / "bpe"
    d.mkdir()
    for name, text in tokenizer_files(bpe.to_json(), bpe.eos_id, 128).items():
        (d / name).write_text(text)
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))  # what made transformers pick Llama's
    hf = AutoTokenizer.from_pretrained(d)
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == bpe.eos_id
    enc = hf(texts).input_ids
    assert enc == bpe.encode_batch(texts)
    assert sum(map(len, enc)) < 0.6 * sum(len(t.encode()) for t in texts)  # merges in use
    assert hf.decode(enc[0]) == texts[0]


def test_generate_and_text_generation_pipeline_on_the_export(hf_export: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    tok = AutoTokenizer.from_pretrained(hf_export)
    model = AutoModelForCausalLM.from_pretrained(hf_export)
    ids = tok("ROMEO:", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    assert out.shape[1] > ids.input_ids.shape[1] and int(out.max()) < 257
    assert tok.decode(out[0]).startswith("ROMEO:")
    gen = pipeline("text-generation", model=str(hf_export), device="cpu")
    text = gen("KING", max_new_tokens=30, do_sample=False)[0]["generated_text"]
    assert text.startswith("KING") and len(text) > 10
    assert sum(c.isalpha() or c.isspace() for c in text) > 0.7 * len(text)


def test_sharded_export_loads_with_the_same_logits(
    trained_run: Path, hf_export: Path, tmp_path: Path
) -> None:
    from llmpipe.cli import main
    from transformers import AutoModelForCausalLM

    out = tmp_path / "sharded"
    assert main(["export", str(trained_run), "--out", str(out), "--max-shard-size", "70KB"]) == 0
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(files) > 2 and sorted(set(index["weight_map"].values())) == files
    assert all(p.stat().st_size < 70_000 + 1024 for p in out.glob("model-*.safetensors"))
    ids = torch.tensor([list(b"But soft, what light through yonder window breaks?")])
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(out)(ids).logits
        b = AutoModelForCausalLM.from_pretrained(hf_export)(ids).logits
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert main(["export", str(trained_run), "--out", str(tmp_path / "x"), "--max-shard-size", "lots"]) == 2
