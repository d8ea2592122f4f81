"""Load the model to compress (a run directory or an HF Llama checkpoint) and write dense HF checkpoints.

A run directory is what ``train/pretrain.py`` writes (``config.yaml`` + ``checkpoints/``); an HF
directory is what ``train/export_hf.py`` writes (``config.json`` + ``model.safetensors`` +
``tokenizer.json``). Either way the model comes back as the trainer's ``Transformer`` in fp32 on CPU.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from llmpipe.errors import InputError
from llmpipe.train import export_hf
from llmpipe.train.config import RunConfig
from llmpipe.train.model import ModelConfig, Transformer

MASKS_FILE = "masks.safetensors"


@dataclass
class Loaded:
    model: Transformer
    tokenizer: Path | None  # tokenizer.json
    eos_id: int | None
    shards: Path | None  # the run's shard directory (calibration / evaluation default)
    qat: dict[str, Any] | None  # the run's qat section, when it trained with fake quantization
    masks: dict[str, torch.Tensor]  # pruning masks saved with an HF checkpoint by `llmpipe prune`


def model_config_from_hf(c: dict[str, Any]) -> ModelConfig:
    if c.get("model_type") != "llama":
        raise InputError(
            f"config.json: model_type {c.get('model_type')!r}; only llama checkpoints are supported"
        )
    return ModelConfig(
        dim=c["hidden_size"], n_layers=c["num_hidden_layers"], n_heads=c["num_attention_heads"],
        n_kv_heads=c.get("num_key_value_heads"), ffn_hidden=c["intermediate_size"],
        vocab_size=c["vocab_size"], max_seq_len=c["max_position_embeddings"], norm_eps=c["rms_norm_eps"],
        rope_theta=c.get("rope_theta", 10000.0), tie_embeddings=bool(c.get("tie_word_embeddings", False)),
        init_std=c.get("initializer_range", 0.02),
    )  # fmt: skip


def hf_to_ours(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of ``train.export_hf.hf_state_dict``."""
    layer = {v: k for k, v in export_hf._LAYER.items()}
    out: dict[str, torch.Tensor] = {}
    for key, t in hf.items():
        if key == "model.embed_tokens.weight":
            name = "tok_embeddings.weight"
        elif key == "model.norm.weight":
            name = "norm.weight"
        elif key == "lm_head.weight":
            name = "output.weight"
        elif key.startswith("model.layers."):
            _, _, i, rest = key.split(".", 3)
            module, param = rest.rsplit(".", 1)
            if module not in layer:
                raise InputError(f"unexpected tensor {key} in the checkpoint")
            name = f"layers.{i}.{layer[module]}.{param}"
        else:
            raise InputError(f"unexpected tensor {key} in the checkpoint")
        out[name] = t
    return out


def load_model(path: Path) -> Loaded:
    """A run directory (latest checkpoint) or an HF Llama directory -> fp32 CPU model in eval mode."""
    from safetensors.torch import load_file

    if (path / "config.yaml").is_file():
        from llmpipe.data.format import MANIFEST, TOKENIZER_FILE

        cfg, model, _ = export_hf.load_run(path)
        shards = cfg.data.path
        tok = shards / TOKENIZER_FILE if shards is not None else None
        eos = None
        if shards is not None and (shards / MANIFEST).is_file():
            eos = json.loads((shards / MANIFEST).read_text())["tokenizer"]["eos_id"]
        qat = None
        if hasattr(cfg, "qat") and cfg.qat.scheme != "none":
            qat = {"scheme": cfg.qat.scheme, "group_size": cfg.qat.group_size}
        return Loaded(model, tok if tok and tok.is_file() else None, eos, shards, qat, {})
    cfg_file, weights = path / "config.json", path / "model.safetensors"
    if not cfg_file.is_file() or not weights.is_file():
        raise InputError(
            f"{path}: neither a run directory (config.yaml) nor an HF checkpoint (config.json + model.safetensors)"
        )
    hf_cfg = json.loads(cfg_file.read_text())
    model = Transformer(model_config_from_hf(hf_cfg))
    state = hf_to_ours(load_file(str(weights)))
    if model.cfg.tie_embeddings:
        state.pop("output.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "output.weight" and model.cfg.tie_embeddings)]
    if missing or unexpected:
        raise InputError(f"{weights}: missing {missing[:3]} / unexpected {unexpected[:3]} tensors")
    model.eval()
    tok = path / "tokenizer.json"
    masks = load_file(str(path / MASKS_FILE)) if (path / MASKS_FILE).is_file() else {}
    meta = path / "llmpipe_export.json"
    shards = None
    if meta.is_file():
        s = json.loads(meta.read_text()).get("shards")
        shards = Path(s) if s else None
    return Loaded(model, tok if tok.is_file() else None, hf_cfg.get("eos_token_id"), shards, None, masks)


def hf_config_of(model: Transformer, loaded: Loaded) -> dict[str, Any]:
    result: dict[str, Any] = export_hf.hf_config(RunConfig(model=model.cfg), loaded.eos_id)
    return result


def save_hf(
    model: Transformer,
    out: Path,
    loaded: Loaded,
    *,
    masks: dict[str, torch.Tensor] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write a dense model as an HF Llama checkpoint (atomically), plus pruning masks if any."""
    from safetensors.torch import save_file

    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(export_hf.hf_state_dict(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(hf_config_of(model, loaded), indent=2) + "\n")
    if loaded.tokenizer is not None:
        shutil.copyfile(loaded.tokenizer, tmp / "tokenizer.json")
    meta = {"shards": str(loaded.shards) if loaded.shards else None, **(extra or {})}
    (tmp / "llmpipe_export.json").write_text(json.dumps(meta) + "\n")
    if masks:
        save_file({k: v.contiguous() for k, v in masks.items()}, str(tmp / MASKS_FILE))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
