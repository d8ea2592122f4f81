"""The encoder (train/encoder.py) as ``transformers.BertForMaskedLM``: config.json, tensor names, and the
``<mask>`` token in the exported tokenizer. Export (train/export_hf.py) calls this for ``model.arch=encoder``.

The encoder is BERT's function exactly (learned absolute positions from 0, post-norm LayerNorm, exact GELU,
biases, the prediction head with its own bias), so export is a renaming plus one zero tensor: BERT's token
type embedding, which the encoder does not have (type 0 everywhere adds zero). Document masking across a
packed row is a training-time option; BERT attends over its whole (unpadded) input.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from llmpipe.errors import LlmpipeError
from llmpipe.train.encoder import Encoder
from llmpipe.train.model import ModelConfig

# our module inside a block -> BERT's
LAYER = {
    "attn.wq": "attention.self.query",
    "attn.wk": "attention.self.key",
    "attn.wv": "attention.self.value",
    "attn.wo": "attention.output.dense",
    "attn_norm": "attention.output.LayerNorm",
    "ffn.w1": "intermediate.dense",
    "ffn.w2": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
TOP = {
    "tok_embeddings.weight": "bert.embeddings.word_embeddings.weight",
    "pos_embeddings.weight": "bert.embeddings.position_embeddings.weight",
    "emb_norm.weight": "bert.embeddings.LayerNorm.weight",
    "emb_norm.bias": "bert.embeddings.LayerNorm.bias",
    "head.dense.weight": "cls.predictions.transform.dense.weight",
    "head.dense.bias": "cls.predictions.transform.dense.bias",
    "head.norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "head.norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "output.weight": "cls.predictions.decoder.weight",
    "output.bias": "cls.predictions.bias",
}


def bert_name(name: str) -> str:
    """Our parameter name -> BERT's (``layers.0.ffn.w1.weight`` -> ``bert.encoder.layer.0.intermediate.dense.weight``)."""
    if name in TOP:
        return TOP[name]
    _, i, rest = name.split(".", 2)
    module, param = rest.rsplit(".", 1)
    return f"bert.encoder.layer.{i}.{LAYER[module]}.{param}"


def bert_state_dict(model: Encoder) -> dict[str, torch.Tensor]:
    """BERT's tensors (fp32, contiguous) for safetensors; a tied output matrix is written once (BERT ties)."""
    out: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        if name == "output.weight" and model.cfg.tie_embeddings:
            continue
        out[bert_name(name)] = p.detach().float().contiguous().clone()
    out["bert.embeddings.token_type_embeddings.weight"] = torch.zeros(1, model.cfg.dim)
    return out


def bert_config(cfg: ModelConfig, *, mask_id: int, pad_id: int | None) -> dict[str, Any]:
    """BERT's config.json; ``pad_id``: the reserved <pad>, else EOS (which pads the shards' rows)."""
    assert cfg.vocab_size is not None and cfg.max_seq_len is not None
    return {
        "architectures": ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.hidden,
        "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": cfg.max_seq_len,
        "type_vocab_size": 1,
        "initializer_range": cfg.init_std,
        "layer_norm_eps": cfg.norm_eps,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": cfg.tie_embeddings,
        "pad_token_id": pad_id,
        "mask_token_id": mask_id,
        "torch_dtype": "float32",
    }


def with_mask_token(tokenizer_json: str, mask_id: int, mask_token: str) -> str:
    """The tokenizer.json with ``mask_token`` as a special token of id ``mask_id`` (unchanged when it has it)."""
    tok = json.loads(tokenizer_json)
    added = tok.setdefault("added_tokens", [])
    have = next((t.get("id") for t in added if t.get("content") == mask_token), None)
    if have is not None and have != mask_id:
        raise LlmpipeError(f"the tokenizer has {mask_token} as id {have}, the run trained it as {mask_id}")
    if have is not None:  # reserved by llmpipe curate --special-tokens mlm
        return tokenizer_json
    added.append(
        {
            "id": mask_id,
            "content": mask_token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    return json.dumps(tok, ensure_ascii=False)
