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
from llmpipe.outdir import replaced_whole
from llmpipe.train import export_hf, hf
from llmpipe.train.hf import MASKS_FILE
from llmpipe.train.model import Transformer
from llmpipe.train.rundir import EXPORT_MARKER


@dataclass
class Loaded:
    model: Transformer
    tokenizer: Path | None  # tokenizer.json
    eos_id: int | None
    shards: Path | None  # the run's shard directory (calibration / evaluation default)
    qat: dict[str, Any] | None  # the run's qat section, when it trained with fake quantization
    masks: dict[str, torch.Tensor]  # pruning masks saved with an HF checkpoint by `llmpipe prune`


def load_model(path: Path) -> Loaded:
    """A run directory (latest checkpoint) or an HF Llama directory -> fp32 CPU model in eval mode."""
    if (path / "config.yaml").is_file():
        from llmpipe.data.format import MANIFEST, TOKENIZER_FILE, read_manifest

        cfg, model, _ = export_hf.load_run(path)
        shards = cfg.data.path
        tok = shards / TOKENIZER_FILE if shards is not None else None
        if tok is not None and tok.is_file():
            export_hf.read_tokenizer(tok, "the tokenizer of the shards the run trained on is damaged")
        eos = None
        if shards is not None and (shards / MANIFEST).is_file():
            eos = read_manifest(shards)["tokenizer"]["eos_id"]
        qat = None
        if hasattr(cfg, "qat") and cfg.qat.scheme != "none":
            qat = {"scheme": cfg.qat.scheme, "group_size": cfg.qat.group_size}
        return Loaded(model, tok if tok and tok.is_file() else None, eos, shards, qat, {})
    if not (path / "config.json").is_file() or not (
        (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file()
    ):
        raise InputError(
            f"{path}: neither a run directory (config.yaml) nor an HF checkpoint (config.json + model.safetensors)"
        )
    hf_cfg = hf.read_config(path)
    model = Transformer(hf.model_config(hf_cfg))
    hf.load_weights(model, path)
    model.eval()
    tok = path / "tokenizer.json"
    if tok.is_file():
        export_hf.read_tokenizer(tok, "the model directory's tokenizer is damaged")
    masks = hf.load_masks(path)
    shards = exported_shards(path)
    return Loaded(model, tok if tok.is_file() else None, hf.eos_id(hf_cfg), shards, None, masks)


def exported_shards(path: Path) -> Path | None:
    """The shards a model llmpipe wrote (quantize, prune) was measured on, from its
    ``llmpipe_export.json`` (None where it names none, or where there is none); one line where that
    file is damaged."""
    meta = path / EXPORT_MARKER
    if not meta.is_file():
        return None
    doc = hf.read_json(meta)
    shards = doc.get("shards") if isinstance(doc, dict) else None
    if shards is not None and not (isinstance(shards, str) and shards):
        raise InputError(f"{meta}: shards is {json.dumps(shards)[:80]}, not a path (damaged or hand-edited?)")
    return Path(shards) if shards else None


def check_shards(loaded: Loaded, shards: Path | None, whose: Path) -> None:
    """Shards the model is measured or calibrated on hold its token ids: made with its tokenizer (the
    tokenizer files compared), and no larger a vocabulary; one line if not."""
    if shards is None:
        return
    from llmpipe.data.format import check_same_tokenizer, read_manifest
    from llmpipe.errors import ShardError

    vocab = int(loaded.model.cfg.vocab_size or 0)
    size = read_manifest(shards)["tokenizer"]["vocab_size"]
    if size > vocab:
        raise ShardError(f"{shards}: vocabulary of {size} ids, the model {whose} has {vocab}")
    mine = loaded.tokenizer.read_text(encoding="utf-8") if loaded.tokenizer is not None else None
    check_same_tokenizer(shards, mine, str(whose))


def hf_config_of(model: Transformer, loaded: Loaded) -> dict[str, Any]:
    return hf.hf_config(model.cfg, loaded.eos_id)


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

    with replaced_whole(out) as tmp:
        save_file(hf.hf_state_dict(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config_of(model, loaded), indent=2) + "\n")
        if loaded.tokenizer is not None:
            shutil.copyfile(loaded.tokenizer, tmp / "tokenizer.json")
        meta = {"shards": str(loaded.shards) if loaded.shards else None, **(extra or {})}
        (tmp / EXPORT_MARKER).write_text(json.dumps(meta) + "\n")
        if masks:
            save_file({k: v.contiguous() for k, v in masks.items()}, str(tmp / MASKS_FILE))
