"""`llmpipe quantize --format compressed-tensors|gguf`: checkpoints that others load, checked with the
peers themselves on the session's trained tiny model (tied embeddings, grouped-query attention) and
real text: transformers with compressed-tensors, transformers' GGUF loader, gguf's reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from llmpipe.cli import main as llmpipe
from torch import nn

TEXT = Path("reference/books/tiny-shakespeare.txt")


class Logits(nn.Module):
    """A transformers causal LM as llmpipe's bits-per-byte evaluator calls a model: ids -> logits."""

    def __init__(self, hf: nn.Module) -> None:
        super().__init__()
        self.hf = hf

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.hf(ids).logits


def _quantize(run: Path, out: Path, *extra: str) -> dict:
    assert llmpipe(["quantize", str(run), "--out", str(out), "--eval-rows", "8", *extra]) == 0
    return json.loads((out / "compression_report.json").read_text())


def _real_ids(data_dir: Path, tokenizer: Path) -> tuple[str, torch.Tensor]:
    from tokenizers import Tokenizer

    text = (data_dir / TEXT).read_text()[20_000:20_400]
    return text, torch.tensor([Tokenizer.from_file(str(tokenizer)).encode(text).ids[:64]])


def test_compressed_tensors_loads_in_transformers_with_llmpipes_logits(
    trained_run: Path, byte_shards: Path, data_dir: Path, tmp_path: Path
) -> None:
    from compressed_tensors.quantization import QuantizationConfig
    from llmpipe.compress.bpb import bits_per_byte
    from llmpipe.compress.calib import calibration_tokens
    from llmpipe.compress.model_io import load_model
    from llmpipe.compress.quantize import quantize_model
    from llmpipe.compress.spec import QuantSpec
    from safetensors import safe_open
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    text, ids = _real_ids(data_dir, byte_shards / "tokenizer.json")
    for method, strategy in (("int8", "channel"), ("gptq-int4", "group")):  # int4 RTN: the same layout
        out = tmp_path / method
        rep = _quantize(trained_run, out, "--method", method, "--group-size", "32", "--calib-seqs", "8")
        assert rep["format"] == "compressed-tensors"  # the default
        qc = json.loads((out / "config.json").read_text())["quantization_config"]
        assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "pack-quantized"
        assert qc["ignore"] == ["lm_head"]
        weights = QuantizationConfig.model_validate(qc).config_groups["group_0"].weights  # its own schema
        assert weights is not None
        assert (weights.num_bits, weights.type, weights.symmetric, weights.strategy) == (
            8 if method == "int8" else 4, "int", True, strategy)  # fmt: skip
        assert weights.group_size == (None if method == "int8" else 32)
        with safe_open(str(out / "model.safetensors"), framework="pt") as f:
            keys = set(f.keys())
            packed = f.get_tensor("model.layers.0.mlp.down_proj.weight_packed")
        assert "model.layers.0.self_attn.q_proj.weight" not in keys and "lm_head.weight" not in keys  # tied
        assert {"model.layers.1.self_attn.k_proj.weight_scale", "model.layers.1.self_attn.k_proj.weight_shape",
                "model.embed_tokens.weight"} <= keys  # fmt: skip
        assert packed.dtype == torch.int32 and packed.shape == (
            64,
            192 * (8 if method == "int8" else 4) // 32,
        )

        hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        ours = load_model(trained_run).model
        calib = calibration_tokens(byte_shards, 8) if method == "gptq-int4" else None
        quantize_model(ours, QuantSpec(method, 32), calib, blocks_only=True)  # type: ignore[arg-type]
        with torch.no_grad():
            got, want = hf(ids).logits, ours(ids)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-3)
        assert rep["after"]["bpb"] == pytest.approx(
            bits_per_byte(Logits(hf), byte_shards, max_rows=8), rel=1e-5
        )
        assert rep["after"]["bpb"] != rep["before"]["bpb"]  # really quantized
        assert rep["size_bytes"]["weights"] == (out / "model.safetensors").stat().st_size
        tok = AutoTokenizer.from_pretrained(out)
        assert (
            tok(text).input_ids == Tokenizer.from_file(str(byte_shards / "tokenizer.json")).encode(text).ids
        )
    sizes = {m: json.loads((tmp_path / m / "compression_report.json").read_text())["size_bytes"]["weights"]
             for m in ("int8", "gptq-int4")}  # fmt: skip
    assert sizes["gptq-int4"] < sizes["int8"]


def test_gguf_reads_back_and_loads_in_transformers_with_the_dequantized_logits(
    trained_run: Path, byte_shards: Path, data_dir: Path, tmp_path: Path
) -> None:
    from gguf import GGUFReader
    from llmpipe.compress.bpb import bits_per_byte
    from llmpipe.compress.model_io import load_model
    from llmpipe.compress.to_gguf import quantize_gguf
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_tok = Tokenizer.from_file(str(byte_shards / "tokenizer.json"))
    text, ids = _real_ids(data_dir, byte_shards / "tokenizer.json")
    with torch.no_grad():
        fp32 = load_model(trained_run).model(ids)
    sizes = {}
    for method, gtype in (("f16", "F16"), ("int8", "Q8_0"), ("q4_0", "Q4_0")):  # int8 means q8_0 here
        out = tmp_path / method
        rep = _quantize(trained_run, out, "--method", method, "--format", "gguf")
        assert rep["format"] == "gguf" and rep["method"] == gtype.lower()
        sizes[gtype] = rep["size_bytes"]["weights"]
        reader = GGUFReader(str(out / "model.gguf"))
        types = {t.name: t.tensor_type.name for t in reader.tensors}
        assert "output.weight" not in types  # tied: llama.cpp uses token_embd
        assert types["token_embd.weight"] == types["blk.1.ffn_down.weight"] == gtype
        assert types["blk.0.attn_norm.weight"] == types["output_norm.weight"] == "F32"
        assert len(types) == 2 + 9 * 2

        def field(key: str, reader: GGUFReader = reader) -> object:
            return reader.fields[key].contents()

        assert field("general.architecture") == "llama" and field("tokenizer.ggml.model") == "gpt2"
        assert field("llama.attention.head_count_kv") == 2 and field("llama.block_count") == 2
        assert field("tokenizer.ggml.eos_token_id") == 256 and field("tokenizer.ggml.add_bos_token") is False
        tokens = field("tokenizer.ggml.tokens")
        assert isinstance(tokens, list) and len(tokens) == 257 and tokens[256] == "<|endoftext|>"
        assert field("tokenizer.ggml.token_type")[256] == 3  # type: ignore[index]  # control

        hf = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32).eval()
        ours = load_model(trained_run).model
        quantize_gguf(ours, gtype.lower())
        with torch.no_grad():
            got, want = hf(ids).logits, ours(ids)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-3)
        assert not torch.equal(want, fp32)  # really rounded
        assert rep["after"]["bpb"] == pytest.approx(
            bits_per_byte(Logits(hf), byte_shards, max_rows=8), rel=1e-5
        )
        tok = AutoTokenizer.from_pretrained(out, gguf_file="model.gguf")
        for t in (text, " leading space, héllo 🙂\n\n  tabs\tand <|endoftext|> too"):
            enc = tok(t, add_special_tokens=False).input_ids
            assert enc == run_tok.encode(t).ids and tok.decode(enc, clean_up_tokenization_spaces=False) == t
    assert sizes["Q4_0"] < sizes["Q8_0"] < sizes["F16"]


def test_gguf_tokenizer_with_merges_round_trips_and_bad_requests_are_one_line_errors(
    trained_run: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A BPE tokenizer trained by llmpipe (merges, the GPT-2 pattern) in a GGUF of an untrained model
    with a padded vocabulary; the cl100k / o200k patterns map to llama.cpp's pre-tokenizer names."""
    from llmpipe.compress.to_gguf import _pre_name, quantize_gguf, save_gguf
    from llmpipe.tokenizer import Tokenizer
    from llmpipe.train.model import ModelConfig, Transformer
    from transformers import AutoTokenizer

    src = data_dir / TEXT
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(src.read_text()[:200_000])
    pres = {}
    for pattern in ("gpt2", "cl100k", "o200k"):
        tok = Tokenizer.train([corpus], 400, pattern=pattern)
        tok.save(tmp_path / f"{pattern}.json")
        pres[pattern] = _pre_name(json.loads((tmp_path / f"{pattern}.json").read_text()), True)
    assert pres == {"gpt2": "gpt-2", "cl100k": "llama-bpe", "o200k": "gpt-4o"}

    model = Transformer(ModelConfig(dim=64, n_layers=1, n_heads=4, vocab_size=416, max_seq_len=64)).eval()
    raw = quantize_gguf(model, "f16")
    gpt2 = Tokenizer.from_file(tmp_path / "gpt2.json")
    out = save_gguf(model, raw, "f16", tmp_path / "merged", tmp_path / "gpt2.json", gpt2.eos_id)
    hf_tok = AutoTokenizer.from_pretrained(out.parent, gguf_file=out.name)
    text = src.read_text()[300_000:302_000] + "  don't 1234 héllo\r\n\n\tend"
    ids = hf_tok(text, add_special_tokens=False).input_ids
    assert ids == gpt2.encode(text) and hf_tok.decode(ids, clean_up_tokenization_spaces=False) == text
    assert len(ids) < len(text.encode()) * 0.8  # the merges are used

    cases = [
        (["--method", "nf4", "--format", "compressed-tensors"], "needs --format llmpipe"),
        (["--method", "q4_0", "--format", "compressed-tensors"], "use --format gguf"),
        (["--method", "int4", "--format", "gguf", "--group-size", "64"], "GGUF blocks are 32"),
    ]
    capsys.readouterr()
    for argv, want in cases:
        assert llmpipe(["quantize", str(trained_run), *argv, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and want in err, err
        assert not (tmp_path / "x").exists()
