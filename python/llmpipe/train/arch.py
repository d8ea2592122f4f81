"""The model class for ``model.arch``: the decoder (train/model.py) or the encoder (train/encoder.py)."""

from __future__ import annotations

from llmpipe.train.encoder import Encoder
from llmpipe.train.model import ModelConfig, Transformer


def new_model(cfg: ModelConfig) -> Transformer | Encoder:
    """The whole model for ``cfg`` on the current default device (the trainer builds it on meta)."""
    return Encoder(cfg) if cfg.arch == "encoder" else Transformer(cfg)
