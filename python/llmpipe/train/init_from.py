"""Continued pretraining: start the trainer's model from a Llama-format HuggingFace checkpoint.

``model.init_from: HF_DIR`` (config.json + model.safetensors, or sharded with
model.safetensors.index.json) sets the model's shape from config.json, loads the weights by the inverse
of the export's renaming (train/hf.py; the rotary layout is HF's, nothing is permuted), and refuses shards
tokenised by another tokenizer: the vocabularies, merges and added tokens of the shards'
``tokenizer.json`` and the checkpoint's (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``) must be
equal after normalisation (not the file bytes: the same tokenizer saved by another version differs in
layout). The optimizer starts fresh; a resumed run loads its own checkpoint instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmpipe.data.format import TOKENIZER_FILE
from llmpipe.errors import ConfigError, LlmpipeError
from llmpipe.train import hf
from llmpipe.train.model import ModelConfig


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


def prepare(model: ModelConfig, shards: Path) -> None:
    """Before the model is built: check the tokenizer and take the checkpoint's shape."""
    if model.init_from is None:
        return
    hf_dir = Path(model.init_from)
    if not hf_dir.is_dir():
        raise ConfigError(f"model.init_from {hf_dir}: not a directory")
    config = hf.read_config(hf_dir)
    check_tokenizer(shards, hf_dir)
    hf.apply_shape(model, config)
