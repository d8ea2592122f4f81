"""Continued pretraining: start the trainer's model from a Llama-format HuggingFace checkpoint.

``model.init_from: HF_DIR`` (config.json + model.safetensors, or sharded with
model.safetensors.index.json) sets the model's shape from config.json, loads the weights by the inverse
of the export's renaming (train/hf.py; the rotary layout is HF's, so nothing is permuted), holds the
pruning masks the checkpoint carries (``masks.safetensors``, written by ``llmpipe prune``: pruned weights
stay zero after every optimizer step, and the masks travel in each checkpoint's train state), and
refuses shards tokenised by another tokenizer: the vocabularies, merges and added tokens of the shards'
``tokenizer.json`` and the checkpoint's (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``) must be
equal after normalisation (not the file bytes: the same tokenizer saved by another version differs in
layout). The optimizer starts fresh; a resumed run loads its own checkpoint instead.

``init.from_hf: HF_DIR`` (what ``llmpipe prune --finetune`` passes) is the same feature under its older
name: it means exactly ``model.init_from: HF_DIR``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from llmpipe.data.format import TOKENIZER_FILE
from llmpipe.errors import ConfigError, LlmpipeError
from llmpipe.train import hf
from llmpipe.train.model import ModelConfig

if TYPE_CHECKING:
    from llmpipe.compress.training import TrainCompression
    from llmpipe.train.config import RunConfig


def directory(cfg: RunConfig) -> Path | None:
    """The checkpoint a run starts from: ``model.init_from``, or ``init.from_hf`` (the same feature)."""
    a = Path(cfg.model.init_from) if cfg.model.init_from else None
    b = cfg.init.from_hf
    if a is not None and b is not None and a != b:
        raise ConfigError(f"model.init_from {a} and init.from_hf {b}: name one checkpoint (they are one key)")
    return a if a is not None else b


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


def prepare(model: ModelConfig, shards: Path, hf_dir: Path | None = None) -> None:
    """Before the model is built: check the tokenizer and take the checkpoint's shape
    (``hf_dir``, default ``model.init_from``; nothing to do without one)."""
    if hf_dir is None and model.init_from is not None:
        hf_dir = Path(model.init_from)
    if hf_dir is None:
        return
    if not hf_dir.is_dir():
        raise ConfigError(f"model.init_from {hf_dir}: not a directory")
    if model.mup_base_dim:
        raise ConfigError("model.init_from loads standard-parametrisation HF weights: set mup_base_dim to 0")
    config = hf.read_config(hf_dir)
    check_tokenizer(shards, hf_dir)
    hf.apply_shape(model, config)


def load(model: nn.Module, hf_dir: Path, hooks: TrainCompression) -> None:
    """After the model is built and initialised: the checkpoint's weights, and its pruning masks held
    by ``hooks`` when it has them."""
    hf.load_weights(model, hf_dir)
    masks = hf.load_masks(hf_dir)
    if masks:
        hooks.set_masks(model, masks)
