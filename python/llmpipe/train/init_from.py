"""Continued pretraining: start the trainer's model from a Llama-format HuggingFace checkpoint.

``model.init_from: HF_DIR`` (config.json + model.safetensors, or sharded with
model.safetensors.index.json) sets the model's shape from config.json, loads the weights by the inverse
of train/export_hf.py's renaming (the rotary layout is HF's, so nothing is permuted), and refuses shards
tokenised by another tokenizer: the vocabularies, merges and added tokens of the shards'
``tokenizer.json`` and the checkpoint's (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``) must be
equal after normalisation (not the file bytes: the same tokenizer saved by another version differs in
layout). The optimizer starts fresh; a resumed run loads its own checkpoint instead.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from llmpipe.data.format import TOKENIZER_FILE
from llmpipe.errors import ConfigError, LlmpipeError
from llmpipe.train.export_hf import _LAYER
from llmpipe.train.model import ModelConfig

_FROM_HF = {v: k for k, v in _LAYER.items()}


def read_hf_config(hf_dir: Path) -> dict[str, Any]:
    path = hf_dir / "config.json"
    if not path.is_file():
        raise LlmpipeError(f"model.init_from {hf_dir}: no config.json (a HuggingFace model directory?)")
    cfg: dict[str, Any] = json.loads(path.read_text())
    if cfg.get("model_type") != "llama":
        raise LlmpipeError(
            f"model.init_from {hf_dir}: model_type {cfg.get('model_type')!r}, only 'llama' loads"
        )
    unsupported = [
        f"{k}={cfg.get(k)!r}"
        for k, ok in (
            ("hidden_act", cfg.get("hidden_act", "silu") == "silu"),
            ("rope_scaling", cfg.get("rope_scaling") is None),
            ("attention_bias", not cfg.get("attention_bias", False)),
            ("mlp_bias", not cfg.get("mlp_bias", False)),
            ("head_dim", cfg.get("head_dim") in (None, cfg["hidden_size"] // cfg["num_attention_heads"])),
        )
        if not ok
    ]
    if unsupported:
        raise LlmpipeError(f"model.init_from {hf_dir}: unsupported {', '.join(unsupported)}")
    return cfg


def apply_hf_shape(model: ModelConfig, hf: dict[str, Any]) -> None:
    """The model's shape from the checkpoint's config.json (the YAML's shape keys do not apply)."""
    model.dim = hf["hidden_size"]
    model.n_layers = hf["num_hidden_layers"]
    model.n_heads = hf["num_attention_heads"]
    model.n_kv_heads = hf.get("num_key_value_heads") or hf["num_attention_heads"]
    model.ffn_hidden = hf["intermediate_size"]
    model.vocab_size = hf["vocab_size"]
    model.norm_eps = hf.get("rms_norm_eps", 1e-6)
    model.rope_theta = hf.get("rope_theta", 10000.0)
    model.tie_embeddings = bool(hf.get("tie_word_embeddings", False))


def _merges(raw: list[Any]) -> list[tuple[str, str]]:
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else (m[0], m[1]) for m in raw]  # type: ignore[misc]


def tokenizer_identity(path: Path) -> dict[str, Any]:
    """What decides the ids of a BPE tokenizer: token -> id, the ordered merges, the added tokens."""
    if path.is_dir():
        if (path / TOKENIZER_FILE).is_file():
            return tokenizer_identity(path / TOKENIZER_FILE)
        vocab, merges = path / "vocab.json", path / "merges.txt"
        if not (vocab.is_file() and merges.is_file()):
            raise LlmpipeError(
                f"{path}: no tokenizer.json (or vocab.json + merges.txt) to compare with the shards'"
            )
        lines = [
            ln for ln in merges.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")
        ]
        return {"vocab": json.loads(vocab.read_text(encoding="utf-8")), "merges": _merges(lines), "added": {}}
    tok = json.loads(path.read_text(encoding="utf-8"))
    model = tok.get("model", {})
    return {
        "vocab": dict(model.get("vocab", {})),
        "merges": _merges(model.get("merges", [])),
        "added": {t["content"]: t["id"] for t in tok.get("added_tokens", [])},
    }


def check_tokenizer(shards: Path, hf_dir: Path) -> None:
    ours, theirs = tokenizer_identity(shards / TOKENIZER_FILE), tokenizer_identity(hf_dir)
    vocab_ours = {**ours["vocab"], **ours["added"]}
    vocab_theirs = {**theirs["vocab"], **theirs["added"]}
    if vocab_ours != vocab_theirs or ours["merges"] != theirs["merges"]:
        diff = sorted(set(vocab_ours.items()) ^ set(vocab_theirs.items()))[:3]
        raise LlmpipeError(
            f"the shards in {shards} were tokenised with another tokenizer than the checkpoint {hf_dir} "
            f"({len(vocab_ours)} vs {len(vocab_theirs)} tokens, {len(ours['merges'])} vs "
            f"{len(theirs['merges'])} merges; first differences {diff}); curate with "
            f"--tokenizer {hf_dir}/tokenizer.json"
        )


def _hf_key(name: str, cfg: ModelConfig) -> str | None:
    if name == "tok_embeddings.weight":
        return "model.embed_tokens.weight"
    if name == "norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return None if cfg.tie_embeddings else "lm_head.weight"
    _, i, rest = name.split(".", 2)
    module, param = rest.rsplit(".", 1)
    return f"model.layers.{i}.{_LAYER[module]}.{param}"


def _files(hf_dir: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    index = hf_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {k: hf_dir / v for k, v in weight_map.items()}
    single = hf_dir / "model.safetensors"
    if not single.is_file():
        raise LlmpipeError(f"model.init_from {hf_dir}: no model.safetensors (or its index)")
    with safe_open(str(single), framework="pt") as f:
        return {k: single for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)


@torch.no_grad()
def load_hf_weights(model: nn.Module, cfg: ModelConfig, hf_dir: Path) -> None:
    """Copy every parameter from the checkpoint (after ``to_empty``/``init_weights``); a sharded
    parameter takes its slice of the full tensor, one tensor in memory at a time."""
    where = _files(hf_dir)
    wanted = {}
    for name, p in model.named_parameters():
        key = _hf_key(name, cfg)
        if key is None:
            continue
        if key not in where:
            raise LlmpipeError(f"model.init_from {hf_dir}: no tensor {key} for the model's {name}")
        wanted[name] = (key, p)
    with ExitStack() as stack:
        handles: dict[Path, Any] = {}
        for name, (key, p) in wanted.items():
            path = where[key]
            if path not in handles:
                handles[path] = stack.enter_context(safe_open(str(path), framework="pt"))
            full = handles[path].get_tensor(key)
            if tuple(full.shape) != tuple(p.shape):
                raise LlmpipeError(
                    f"model.init_from {hf_dir}: {key} has shape {tuple(full.shape)}, {name} {tuple(p.shape)}"
                )
            full = full.to(dtype=p.dtype, device=p.to_local().device if isinstance(p, DTensor) else p.device)
            if isinstance(p, DTensor):
                full = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
            p.copy_(full)


def prepare(model: ModelConfig, shards: Path) -> None:
    """Before the model is built: check the tokenizer and take the checkpoint's shape."""
    if model.init_from is None:
        return
    hf_dir = Path(model.init_from)
    if not hf_dir.is_dir():
        raise ConfigError(f"model.init_from {hf_dir}: not a directory")
    hf = read_hf_config(hf_dir)
    check_tokenizer(shards, hf_dir)
    apply_hf_shape(model, hf)
