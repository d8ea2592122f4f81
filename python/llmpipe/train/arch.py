"""The model class for ``model.arch``: the decoder (train/model.py), the encoder (train/encoder.py) or the
encoder-decoder (train/t5.py). Each is built on meta by the trainer, parallelised, then materialised."""

from __future__ import annotations

from llmpipe.train.encoder import Encoder
from llmpipe.train.model import ModelConfig, Transformer
from llmpipe.train.t5 import T5


def new_model(cfg: ModelConfig) -> Transformer | Encoder | T5:
    """The whole model for ``cfg`` on the current default device (the trainer builds it on meta)."""
    if cfg.arch == "encoder":
        return Encoder(cfg)
    if cfg.arch == "encoder_decoder":
        return T5(cfg)
    return Transformer(cfg)
