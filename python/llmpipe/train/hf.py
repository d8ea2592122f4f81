"""HuggingFace Llama interop, written once: config.json <-> ``ModelConfig``, tensor names both ways, and
safetensors weights into a ``Transformer``.

The trainer's parameter names and rotary layout (``rotate_half``) are chosen so that a Llama checkpoint
is a renaming, never a permutation: ``layers.3.attn.wq.weight`` is ``model.layers.3.self_attn.q_proj.weight``.
Export (train/export_hf.py), continued pretraining (``model.init_from`` / ``init.from_hf``,
train/init_from.py) and compression (compress/model_io.py, compress/store.py) all go through here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from llmpipe.errors import InputError
from llmpipe.train.model import ModelConfig, Transformer

MASKS_FILE = "masks.safetensors"  # pruning masks (True = kept) beside the weights, by our parameter name

# our module inside a block -> HF's
LAYER = {
    "attn.wq": "self_attn.q_proj",
    "attn.wk": "self_attn.k_proj",
    "attn.wv": "self_attn.v_proj",
    "attn.wo": "self_attn.o_proj",
    "ffn.w1": "mlp.gate_proj",
    "ffn.w3": "mlp.up_proj",
    "ffn.w2": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_FROM_LAYER = {v: k for k, v in LAYER.items()}
_TOP = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_FROM_TOP = {v: k for k, v in _TOP.items()}

# ModelConfig field -> config.json key: the model's shape (what a checkpoint decides)
SHAPE = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "ffn_hidden": "intermediate_size",
    "vocab_size": "vocab_size",
    "norm_eps": "rms_norm_eps",
    "rope_theta": "rope_theta",
    "tie_embeddings": "tie_word_embeddings",
}


# -- names ---------------------------------------------------------------------------------------------
def hf_name(name: str) -> str:
    """Our parameter name -> HF's (``layers.0.ffn.w1.weight`` -> ``model.layers.0.mlp.gate_proj.weight``)."""
    if name in _TOP:
        return _TOP[name]
    _, i, rest = name.split(".", 2)
    module, param = rest.rsplit(".", 1)
    return f"model.layers.{i}.{LAYER[module]}.{param}"


def our_name(key: str) -> str:
    """HF's tensor name -> ours; an InputError for a tensor a Llama of ours does not have."""
    if key in _FROM_TOP:
        return _FROM_TOP[key]
    if key.startswith("model.layers."):
        _, _, i, rest = key.split(".", 3)
        module, param = rest.rsplit(".", 1)
        if module in _FROM_LAYER and i.isdigit():
            return f"layers.{i}.{_FROM_LAYER[module]}.{param}"
    raise InputError(f"unexpected tensor {key} in the checkpoint")


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """HF names, fp32 copies; a muP model's attention scale and output multiplier are folded into q_proj
    and lm_head (HF Llama scales attention by 1/sqrt(head_dim) and has no output multiplier)."""
    m = model.cfg
    if m.moe.experts:  # MixtralForCausalLM / Qwen2MoeForCausalLM (train/moe_hf.py)
        from llmpipe.train import moe_hf

        return moe_hf.hf_state_dict(model, m)
    if m.mup_base_dim and m.tie_embeddings:
        raise InputError("a muP model with tied embeddings cannot fold its output multiplier for HF")
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        if name == "output.weight" and m.tie_embeddings:
            continue
        if m.mup_base_dim and name.endswith("attn.wq.weight"):
            t = t * ((m.attn_scale or 0.0) * m.head_dim**0.5)
        elif m.mup_base_dim and name == "output.weight":
            t = t / m.width_mult
        out[hf_name(name)] = t.detach().to(torch.float32).contiguous().clone()
    return out


# -- config.json ---------------------------------------------------------------------------------------
def read_config(hf_dir: Path) -> dict[str, Any]:
    """``hf_dir/config.json`` of a Llama our model can be: other architectures and features are refused."""
    path = hf_dir / "config.json"
    if not path.is_file():
        raise InputError(f"{hf_dir}: no config.json (a HuggingFace model directory?)")
    cfg = read_json(path)
    check_config(cfg, str(path))
    return cfg


def read_json(path: Path) -> Any:
    """A JSON file of a model directory (a stranger's: data), or one line saying it does not parse."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InputError(f"{path}: not valid JSON ({e})") from None


#: the shape keys of a Llama config.json our model reads: positive whole numbers (those marked False
#: may be absent)
_SIZES = {
    "hidden_size": True,
    "num_hidden_layers": True,
    "num_attention_heads": True,
    "intermediate_size": True,
    "vocab_size": True,
    "num_key_value_heads": False,
    "max_position_embeddings": False,
    "head_dim": False,
}


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _check_values(cfg: dict[str, Any], where: str) -> None:
    """The values our model reads have their types and ranges (one line naming the first that does not)."""

    def bad(key: str, want: str) -> InputError:
        return InputError(f"{where}: {key} is {json.dumps(cfg.get(key))[:80]}, not {want}")

    for key, required in _SIZES.items():
        if (required or cfg.get(key) is not None) and not _whole(cfg.get(key)):
            raise bad(key, "a positive whole number")
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    if cfg["hidden_size"] % heads or heads % kv:
        raise InputError(
            f"{where}: num_attention_heads {heads} must divide hidden_size {cfg['hidden_size']}, and "
            f"num_key_value_heads {kv} must divide num_attention_heads"
        )
    for key in ("rms_norm_eps", "rope_theta", "initializer_range"):
        v = cfg.get(key)
        if v is not None and not (
            isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf")
        ):
            raise bad(key, "a positive number")
    if not isinstance(cfg.get("tie_word_embeddings", False), bool):
        raise bad("tie_word_embeddings", "true or false")
    eos = cfg.get("eos_token_id")
    ids = eos if isinstance(eos, list) and eos else [eos]
    if eos is not None and not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise bad("eos_token_id", "a token id (or a list of them)")


def eos_id(cfg: dict[str, Any]) -> int | None:
    """The end-of-text id of a checked config.json (the first, where it lists several)."""
    eos = cfg.get("eos_token_id")
    return eos[0] if isinstance(eos, list) else eos


def check_config(cfg: Any, where: str) -> None:
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: not a JSON object (a HuggingFace config.json holds one)")
    if cfg.get("model_type") != "llama":
        raise InputError(f"{where}: model_type {cfg.get('model_type')!r}, only 'llama' loads")
    _check_values(cfg, where)
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
        raise InputError(f"{where}: unsupported {', '.join(unsupported)}")


def shape(hf: dict[str, Any]) -> dict[str, Any]:
    """The ``ModelConfig`` shape fields of a config.json."""
    return {
        "dim": hf["hidden_size"],
        "n_layers": hf["num_hidden_layers"],
        "n_heads": hf["num_attention_heads"],
        "n_kv_heads": hf.get("num_key_value_heads") or hf["num_attention_heads"],
        "ffn_hidden": hf["intermediate_size"],
        "vocab_size": hf["vocab_size"],
        "norm_eps": hf.get("rms_norm_eps", 1e-6),
        "rope_theta": hf.get("rope_theta", 10000.0),
        "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
    }


def apply_shape(model: ModelConfig, hf: dict[str, Any]) -> None:
    """Set ``model``'s shape from a config.json in place (the context length stays the run's)."""
    for key, value in shape(hf).items():
        setattr(model, key, value)


def model_config(hf: dict[str, Any]) -> ModelConfig:
    """The whole model of a config.json: its shape, context length and initialisation scale."""
    check_config(hf, "config.json")
    if hf.get("max_position_embeddings") is None:
        raise InputError("config.json: no max_position_embeddings (the model's context length)")
    return ModelConfig(
        **shape(hf), max_seq_len=hf["max_position_embeddings"], init_std=hf.get("initializer_range", 0.02)
    )


def overrides(hf: dict[str, Any]) -> list[str]:
    """The trainer's ``--model.KEY=VALUE`` overrides for a config.json's model."""
    m = model_config(hf)
    keys = [*SHAPE, "max_seq_len"]
    return [f"--model.{k}={json.dumps(getattr(m, k))}" for k in keys]


def hf_config(m: ModelConfig, eos_id: int | None) -> dict[str, object]:
    """config.json of ``LlamaForCausalLM`` for the model (of the MoE class for a ``model.moe`` model);
    bos = eos = pad = the shards' EOS."""
    cfg: dict[str, object] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": m.vocab_size,
        "hidden_size": m.dim,
        "intermediate_size": m.hidden,
        "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.kv_heads,
        "head_dim": m.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": m.max_seq_len,
        "rms_norm_eps": m.norm_eps,
        "rope_theta": m.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": m.tie_embeddings,
        "initializer_range": m.init_std,
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "pad_token_id": eos_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }
    if m.moe.experts:
        from llmpipe.train import moe_hf

        return moe_hf.hf_config(m, cfg)
    return cfg


# -- weights -------------------------------------------------------------------------------------------
def weight_files(hf_dir: Path) -> dict[str, Path]:
    """HF tensor name -> the safetensors file holding it (model.safetensors, or the shards of its index)."""
    from safetensors import safe_open

    index = hf_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index)
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) and Path(v).name == v and v not in ("", ".", "..") for v in weight_map.values()
        ):
            raise InputError(f"{index}: no weight_map of tensor names to file names in {hf_dir}")
        return {k: hf_dir / v for k, v in weight_map.items()}
    single = hf_dir / "model.safetensors"
    if not single.is_file():
        raise InputError(f"{hf_dir}: no model.safetensors (or its index)")
    with safe_open(str(single), framework="pt") as f:
        return {k: single for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)


@torch.no_grad()
def load_weights(
    model: nn.Module,
    hf_dir: Path,
    *,
    params: Mapping[str, torch.Tensor] | None = None,
    into: Mapping[str, Callable[[torch.Tensor], Any]] | None = None,
) -> None:
    """Copy every parameter of ``model`` (our names; plain, FSDP- or TP-sharded) from the checkpoint in
    ``hf_dir``: a sharded parameter takes its slice of the full tensor, one tensor in memory at a time.
    A tensor missing, of another shape, or one the model does not have is an InputError.

    ``params``: the parameters to fill (default: all of them; a LoRA model's base without its adapters);
    ``into``: our names of weights the model holds otherwise (QLoRA's NF4 layers), each handed its full
    tensor."""
    from safetensors import safe_open

    where = weight_files(hf_dir)
    if params is None:
        params = dict(model.named_parameters())  # a tied output matrix is the embedding: listed once
    into = into or {}
    tied = "output.weight" not in params and "output.weight" not in into
    for key in where:
        name = our_name(key)
        if name not in params and name not in into and not (name == "output.weight" and tied):
            raise InputError(f"{hf_dir}: tensor {key} does not fit the model")
    with ExitStack() as stack:
        handles: dict[Path, Any] = {}
        for name in [*params, *into]:
            key = hf_name(name)
            if key not in where:
                raise InputError(f"{hf_dir}: no tensor {key} for the model's {name}")
            path = where[key]
            if path not in handles:
                handles[path] = stack.enter_context(safe_open(str(path), framework="pt"))
            full = handles[path].get_tensor(key)
            if name in into:
                into[name](full)
                continue
            p = params[name]
            if tuple(full.shape) != tuple(p.shape):
                raise InputError(f"{hf_dir}: {key} has shape {tuple(full.shape)}, {name} {tuple(p.shape)}")
            full = full.to(dtype=p.dtype, device=p.to_local().device if isinstance(p, DTensor) else p.device)
            if isinstance(p, DTensor):
                full = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
            p.copy_(full)


def load_masks(hf_dir: Path) -> dict[str, torch.Tensor]:
    """The pruning masks saved beside the weights (``llmpipe prune``), or none."""
    from safetensors.torch import load_file

    path = hf_dir / MASKS_FILE
    return load_file(str(path)) if path.is_file() else {}
