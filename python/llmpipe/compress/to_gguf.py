"""GGUF (llama.cpp, Ollama, LM Studio): one self-contained file, written with the ``gguf`` package.

    model.gguf   general.architecture = llama, the llama.* hyperparameters, tokenizer.ggml.* (model
                 "gpt2": byte-level BPE with its tokens, token types, merges, pre-tokenizer name and
                 bos/eos ids, so llama.cpp needs nothing else), and the tensors under llama.cpp's names:
                 token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate,
                 ffn_up, ffn_down}, output_norm, output (absent when the embedding is tied).

Types: ``f16`` (every matrix F16), ``q8_0`` (blocks of 32 weights along a row, int8 codes and one fp16
scale: 8.5 bits a weight), ``q4_0`` (blocks of 32, 4-bit codes and one fp16 scale: 4.5 bits). Every
matrix, the embedding and the output head included, takes the type; norm weights stay F32 (llama.cpp's
rule for 1-D tensors). The codes are ``gguf.quants.quantize``'s, i.e. llama.cpp's reference rounding.

Rotary: llmpipe (like HF) rotates the two halves of each head; ggml's llama rope rotates adjacent pairs.
As llama.cpp's convert_hf_to_gguf.py does, the rows of attn_q and attn_k are permuted per head so that
the two agree (transformers' GGUF loader undoes this permutation).

The model kept in memory for the report and the checks is llmpipe's model with every weight replaced by
its dequantized GGUF value (``gguf.quants.dequantize``), which is what a GGUF reader computes with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from llmpipe.compress.names import GGUF_METHODS
from llmpipe.errors import InputError
from llmpipe.outdir import replaced_whole

GGUF_FILE = "model.gguf"
ALIASES = {"int8": "q8_0", "int4": "q4_0"}  # ``--method int8 --format gguf``
BLOCK = 32

# our module inside a block -> llama.cpp's tensor name inside blk.N
LAYER = {
    "attn_norm": "attn_norm",
    "attn.wq": "attn_q",
    "attn.wk": "attn_k",
    "attn.wv": "attn_v",
    "attn.wo": "attn_output",
    "ffn_norm": "ffn_norm",
    "ffn.w1": "ffn_gate",
    "ffn.w3": "ffn_up",
    "ffn.w2": "ffn_down",
}
TOP = {"tok_embeddings": "token_embd", "norm": "output_norm", "output": "output"}


def gguf_name(name: str) -> str:
    """Our parameter name -> llama.cpp's (``layers.0.attn.wq.weight`` -> ``blk.0.attn_q.weight``)."""
    module, param = name.rsplit(".", 1)
    if module in TOP:
        return f"{TOP[module]}.{param}"
    _, i, rest = module.split(".", 2)
    return f"blk.{i}.{LAYER[rest]}.{param}"


def permute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's ``LlamaModel.permute``: each head's rows from halves to adjacent pairs.
    Works on quantized rows too (a row's blocks move with it)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def qtype_of(method: str) -> Any:
    from gguf import GGMLQuantizationType

    return {"f16": GGMLQuantizationType.F16, "q8_0": GGMLQuantizationType.Q8_0,
            "q4_0": GGMLQuantizationType.Q4_0}[method]  # fmt: skip


def file_type_of(method: str) -> Any:
    from gguf import LlamaFileType

    return {"f16": LlamaFileType.MOSTLY_F16, "q8_0": LlamaFileType.MOSTLY_Q8_0,
            "q4_0": LlamaFileType.MOSTLY_Q4_0}[method]  # fmt: skip


def check_model(model: nn.Module, method: str) -> None:
    cfg: Any = model.cfg
    if method not in GGUF_METHODS:
        raise InputError(
            f"--format gguf takes --method {', '.join(GGUF_METHODS)} (or int8, int4), not {method}"
        )
    if cfg.mup_base_dim:
        raise InputError("a muP model cannot be written as GGUF (export it with `llmpipe export` first)")
    if method != "f16":
        for name, p in model.named_parameters():
            if p.ndim == 2 and p.shape[1] % BLOCK:
                raise InputError(f"{method}: the width {p.shape[1]} of {name} is not a multiple of {BLOCK}")


@torch.no_grad()
def quantize_gguf(model: nn.Module, method: str) -> dict[str, np.ndarray]:
    """Quantize every matrix of ``model`` to the GGUF type and write the dequantized values back into
    the model (in place). Returns our parameter name -> the raw GGUF data (unpermuted)."""
    from gguf import quants

    check_model(model, method)
    qtype = qtype_of(method)
    raw: dict[str, np.ndarray] = {}
    for name, p in model.named_parameters():  # a tied output head is the embedding: listed once
        w = p.detach().float().cpu().numpy()
        if p.ndim == 1:
            raw[name] = w.astype(np.float32)
            continue
        data = quants.quantize(w, qtype)
        raw[name] = data
        p.copy_(torch.from_numpy(np.asarray(quants.dequantize(data, qtype), dtype=np.float32)).view_as(p))
    return raw


# -- tokenizer ------------------------------------------------------------------------------------------
def _pre_name(doc: dict[str, Any], has_merges: bool) -> str:
    """llama.cpp's pre-tokenizer name for the tokenizer.json's pre-tokenizer."""
    pre = doc.get("pre_tokenizer") or {}
    items = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    byte_level = [p for p in items if p.get("type") == "ByteLevel"]
    splits = [p for p in items if p.get("type") == "Split"]
    if len(byte_level) != 1 or byte_level[0].get("add_prefix_space"):
        raise InputError("GGUF: the tokenizer is not a byte-level BPE without prefix space")
    if not has_merges:
        return "gpt-2"  # bytes only: every piece splits into single bytes whatever the pattern
    if not splits:
        if byte_level[0].get("use_regex", True):
            return "gpt-2"
        raise InputError("GGUF: a byte-level BPE with merges needs a pre-tokenizer pattern")
    source = splits[0].get("pattern", {}).get("Regex", "")
    known = {_GPT2: "gpt-2", _CL100K: "llama-bpe", _CL100K_TIKTOKEN: "llama-bpe", _O200K: "gpt-4o"}
    if source not in known:
        raise InputError("GGUF: the tokenizer's pre-tokenizer pattern has no llama.cpp equivalent")
    return known[source]


_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_CL100K = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+"
    r"|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
)
_CL100K_TIKTOKEN = _CL100K.replace(r"\p{N}{1,3}", r"\p{N}{1,3}+")
_O200K = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def tokenizer_metadata(tokenizer: Path, vocab_size: int, eos_id: int | None) -> dict[str, Any]:
    """tokenizer.ggml.* of a byte-level BPE tokenizer.json, padded to the model's vocabulary."""
    from gguf import TokenType

    doc = json.loads(tokenizer.read_text())
    model = doc.get("model", {})
    if model.get("type") != "BPE":
        raise InputError(f"{tokenizer}: GGUF export needs a BPE tokenizer, not {model.get('type')}")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    tokens: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    special = set()
    for t in doc.get("added_tokens", []):
        tokens[t["id"]] = t["content"]
        if t.get("special"):
            special.add(t["id"])
    if max(tokens) >= vocab_size:
        raise InputError(
            f"{tokenizer}: token id {max(tokens)} is beyond the model's vocabulary of {vocab_size}"
        )
    names, types = [], []
    for i in range(vocab_size):
        if i in tokens:
            names.append(tokens[i])
            types.append(TokenType.CONTROL if i in special else TokenType.NORMAL)
        else:  # a padded vocabulary, as convert_hf_to_gguf.py writes it
            names.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
    return {"pre": _pre_name(doc, bool(merges)), "tokens": names, "types": types, "merges": merges,
            "eos": eos_id}  # fmt: skip


# -- the file -------------------------------------------------------------------------------------------
def save_gguf(
    model: nn.Module,
    raw: dict[str, np.ndarray],
    method: str,
    out: Path,
    tokenizer: Path | None,
    eos_id: int | None,
    name: str = "llmpipe",
) -> Path:
    """Write ``out/model.gguf`` atomically from ``quantize_gguf``'s raw tensors; returns the file."""

    from gguf import GGMLQuantizationType, GGUFWriter

    if tokenizer is None:
        raise InputError("GGUF holds the tokenizer: this model has no tokenizer.json")
    cfg: Any = model.cfg
    tok = tokenizer_metadata(tokenizer, int(cfg.vocab_size), eos_id)
    qtype = qtype_of(method)
    with replaced_whole(out) as tmp:
        w = GGUFWriter(str(tmp / GGUF_FILE), "llama")
        w.add_name(name)
        w.add_file_type(file_type_of(method))
        w.add_quantization_version(2)
        w.add_vocab_size(int(cfg.vocab_size))
        w.add_context_length(int(cfg.max_seq_len))
        w.add_embedding_length(int(cfg.dim))
        w.add_block_count(int(cfg.n_layers))
        w.add_feed_forward_length(int(cfg.hidden))
        w.add_head_count(int(cfg.n_heads))
        w.add_head_count_kv(int(cfg.kv_heads))
        w.add_rope_dimension_count(int(cfg.head_dim))
        w.add_rope_freq_base(float(cfg.rope_theta))
        w.add_layer_norm_rms_eps(float(cfg.norm_eps))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(tok["pre"])
        w.add_token_list(tok["tokens"])
        w.add_token_types(tok["types"])
        w.add_token_scores([0.0] * len(tok["tokens"]))
        if tok["merges"]:  # a bytes-only vocabulary has none (gguf cannot write an empty array)
            w.add_token_merges(tok["merges"])
        w.add_add_space_prefix(False)
        if eos_id is not None:
            w.add_bos_token_id(eos_id)  # the shards' one special token: documents are separated by it
            w.add_eos_token_id(eos_id)
            w.add_pad_token_id(eos_id)
        w.add_add_bos_token(False)
        w.add_add_eos_token(False)
        for pname, data in raw.items():
            if pname == "output.weight" and cfg.tie_embeddings:
                continue
            if pname.endswith("attn.wq.weight"):
                data = permute_rope(data, int(cfg.n_heads))
            elif pname.endswith("attn.wk.weight"):
                data = permute_rope(data, int(cfg.kv_heads))
            if data.ndim == 1:
                w.add_tensor(gguf_name(pname), data)
            else:
                raw_dtype = None if qtype == GGMLQuantizationType.F16 else qtype
                w.add_tensor(gguf_name(pname), np.ascontiguousarray(data), raw_dtype=raw_dtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out / GGUF_FILE
