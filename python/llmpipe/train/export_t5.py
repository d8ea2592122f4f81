"""Export an encoder-decoder run (``model.arch=encoder_decoder``) as ``T5ForConditionalGeneration``.

``llmpipe export RUN --out DIR`` comes here for such a run (train/export_hf.py). The trainer's T5
(train/t5.py) is transformers' function, so export renames tensors; the tokenizer gains ``<pad>`` and
the sentinels ``<extra_id_0>``... at the ids the run trained them at (its config's span section).
``AutoModelForSeq2SeqLM`` and ``AutoTokenizer`` load the directory; ``generate`` runs on it.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from llmpipe.data import ShardDataset
from llmpipe.errors import LlmpipeError
from llmpipe.tokenizer import sentinel_token
from llmpipe.train.checkpoint import chosen_checkpoint, load_dcp
from llmpipe.train.config import RunConfig
from llmpipe.train.span_corruption import PAD_TOKEN, Seq2SeqBatch, SpanCorruptor
from llmpipe.train.t5 import MAX_DISTANCE, NUM_BUCKETS, T5


def load_t5(cfg: RunConfig, run_dir: Path, step: int | None = None) -> tuple[T5, Path]:
    """The run's model (fp32, CPU, eval mode) from a checkpoint (default: the latest)."""
    path = chosen_checkpoint(run_dir, step)
    model = T5(cfg.model)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    if cfg.model.tie_embeddings:
        state.pop("model.output.weight", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        load_dcp(state, path, no_dist=True)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=False)
    model.eval()
    return model, path


_ATTN = {"wq": "q", "wk": "k", "wv": "v", "wo": "o"}
_FFN = {"w1": "wi_0", "w3": "wi_1", "w2": "wo"}


def hf_name(name: str) -> str:
    """The trainer's parameter name as transformers' T5 names it."""
    if name == "tok_embeddings.weight":
        return "shared.weight"
    if name == "output.weight":
        return "lm_head.weight"
    stack, rest = name.split(".", 1)
    if rest == "rel_bias.weight":
        return f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    if rest == "norm.weight":
        return f"{stack}.final_layer_norm.weight"
    _, i, part, leaf = rest.split(".", 3)  # layers.I.PART.LEAF
    ffn = 2 if stack == "decoder" else 1
    where = {
        "attn_norm": "layer.0.layer_norm",
        "attn": "layer.0.SelfAttention",
        "cross_norm": "layer.1.layer_norm",
        "cross": "layer.1.EncDecAttention",
        "ffn_norm": f"layer.{ffn}.layer_norm",
        "ffn": f"layer.{ffn}.DenseReluDense",
    }[part]
    if part in ("attn", "cross"):
        leaf = f"{_ATTN[leaf.split('.')[0]]}.weight"
    elif part == "ffn":
        leaf = f"{_FFN[leaf.split('.')[0]]}.weight"
    return f"{stack}.block.{i}.{where}.{leaf}"


def hf_state_dict(model: T5) -> dict[str, torch.Tensor]:
    out = {hf_name(k): v.detach().contiguous() for k, v in model.state_dict().items()}
    out["encoder.embed_tokens.weight"] = out["shared.weight"]
    out["decoder.embed_tokens.weight"] = out["shared.weight"]
    if model.cfg.tie_embeddings:
        out.pop("lm_head.weight", None)
    # safetensors refuses tensors that share memory: the tied copies are written once each
    return {k: v.clone() for k, v in out.items()}


def hf_config(cfg: RunConfig, eos_id: int) -> dict[str, object]:
    m = cfg.model
    return {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "d_model": m.dim,
        "d_kv": m.head_dim,
        "d_ff": m.hidden,
        "num_layers": m.n_layers,
        "num_decoder_layers": m.n_layers,
        "num_heads": m.n_heads,
        "relative_attention_num_buckets": NUM_BUCKETS,
        "relative_attention_max_distance": MAX_DISTANCE,
        "dropout_rate": m.dropout,
        "layer_norm_epsilon": m.norm_eps,
        "initializer_factor": 1.0,
        "feed_forward_proj": "gated-gelu",
        "is_encoder_decoder": True,
        "use_cache": True,
        "tie_word_embeddings": m.tie_embeddings,
        "vocab_size": m.vocab_size,
        "pad_token_id": cfg.span.extra_ids_from,
        "decoder_start_token_id": cfg.span.extra_ids_from,
        "eos_token_id": eos_id,
        "torch_dtype": "float32",
    }


def extra_tokens(cfg: RunConfig, seq_len: int, eos_id: int) -> list[str]:
    """<pad> and the run's sentinels, in id order from span.extra_ids_from."""
    spans = SpanCorruptor(cfg.span, seq_len + 1, eos_id, 0).lengths.spans
    return [PAD_TOKEN, *(sentinel_token(k) for k in range(spans))]


def with_extra_tokens(tokenizer_json: str, first_id: int, tokens: list[str]) -> str:
    """The tokenizer with ``tokens`` added as special tokens at ``first_id``, ``first_id + 1``, ...;
    unchanged when it holds them there already (reserved by ``llmpipe curate --special-tokens t5``)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    if tok.token_to_id(tokens[0]) is not None:
        wrong = [t for k, t in enumerate(tokens) if tok.token_to_id(t) != first_id + k]
        if wrong:
            raise LlmpipeError(
                f"the tokenizer holds {tokens[0]} but not the run's extra ids at {first_id}, {first_id + 1}, "
                f"... (span.extra_ids_from): {', '.join(wrong[:3])} differ"
            )
        return tokenizer_json
    if tok.get_vocab_size(with_added_tokens=True) != first_id:
        raise LlmpipeError(
            f"the tokenizer has {tok.get_vocab_size(with_added_tokens=True)} ids but the run's extra ids "
            f"start at {first_id} (span.extra_ids_from): its sentinels cannot be named in it"
        )
    tok.add_special_tokens(tokens)
    for k, t in enumerate(tokens):
        assert tok.token_to_id(t) == first_id + k
    return str(tok.to_str())


def tokenizer_files(tokenizer_json: str, eos: str, max_len: int, sentinels: list[str]) -> dict[str, str]:
    config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "additional_special_tokens": sentinels,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": max_len,
    }
    names = {"eos_token": eos, "pad_token": PAD_TOKEN, "additional_special_tokens": sentinels}
    return {
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
        "special_tokens_map.json": json.dumps(names, indent=2) + "\n",
    }


def write_dir(
    cfg: RunConfig, model: T5, out: Path, tokenizer_json: str, seq_len: int, eos_id: int
) -> dict[str, torch.Tensor]:
    """config.json, generation_config.json and the tokenizer files into ``out``; returns the weights
    (HF names) for export_hf.save_weights."""
    tokens = extra_tokens(cfg, seq_len, eos_id)
    tok = with_extra_tokens(tokenizer_json, cfg.span.extra_ids_from, tokens)
    from tokenizers import Tokenizer

    eos = Tokenizer.from_str(tok).id_to_token(eos_id)
    if eos is None:
        raise LlmpipeError(f"the tokenizer has no token with the shards' EOS id {eos_id}")
    (out / "config.json").write_text(json.dumps(hf_config(cfg, eos_id), indent=2) + "\n")
    gen = {
        "decoder_start_token_id": cfg.span.extra_ids_from,
        "eos_token_id": eos_id,
        "pad_token_id": cfg.span.extra_ids_from,
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    max_len = cfg.model.max_seq_len or seq_len
    # every sentinel the tokenizer holds (those the shards reserved beyond the run's too), in order
    reserved = Tokenizer.from_str(tok).get_vocab(with_added_tokens=True)
    sentinels = list(tokens[1:])
    while sentinel_token(len(sentinels)) in reserved:
        sentinels.append(sentinel_token(len(sentinels)))
    for name, text in tokenizer_files(tok, eos, max_len, sentinels).items():
        (out / name).write_text(text, encoding="utf-8")
    return hf_state_dict(model)


def is_t5_run(path: Path) -> bool:
    """``path`` is a run directory of an encoder-decoder (span corruption) run."""
    from llmpipe.config import load_yaml
    from llmpipe.train.config import from_saved

    if not ((path / "config.yaml").is_file() and (path / "checkpoints").is_dir()):
        return False
    return from_saved(load_yaml(path / "config.yaml")).model.arch == "encoder_decoder"


@torch.no_grad()
def span_loss(
    run_dir: Path, shards: Path, split: str = "val", *, batch_size: int = 8, device: str = "cpu"
) -> dict[str, float]:
    """The span-corruption loss (nats per target token) of a run's latest checkpoint on every row of a
    shard split, corrupted as in training (the run's noise density, span length, extra ids and data
    seed): ``{"rows", "tokens", "loss", "ppl"}``."""
    import math

    import torch.nn.functional as F

    from llmpipe.config import load_yaml
    from llmpipe.data import ShardDataset
    from llmpipe.train.config import from_saved

    cfg = from_saved(load_yaml(run_dir / "config.yaml"))
    model, _ = load_t5(cfg, run_dir)
    model.to(device)
    ds = ShardDataset(shards, split)
    ds.require_samples(f"pass --shards DIR with a {split} split, or --split train")
    corruptor = SpanCorruptor(cfg.span, ds.seq_len + 1, ds.eos_id, cfg.data.seed)
    extra_ids_reserved = ds.special_tokens.get(PAD_TOKEN) == cfg.span.extra_ids_from
    if model.cfg.vocab_size is None or (ds.vocab_size > cfg.span.extra_ids_from and not extra_ids_reserved):
        raise LlmpipeError(f"{shards}: its vocabulary of {ds.vocab_size} is not the run's tokenizer's")
    total, tokens, rows = 0.0, 0, 0
    for b in every_row(ds, corruptor, batch_size, device):
        logits = model(b.input, b.decoder_input)
        total += float(F.cross_entropy(logits.flatten(0, 1), b.target.long().flatten(), reduction="sum"))
        tokens += int((b.target != -100).sum())
        rows += len(b.input)
    loss = total / max(tokens, 1)
    return {"rows": rows, "tokens": tokens, "loss": loss, "ppl": math.exp(min(loss, 700.0))}


def every_row(
    ds: ShardDataset, corruptor: SpanCorruptor, batch_size: int, device: str = "cpu"
) -> Iterator[Seq2SeqBatch]:
    """Every row of ``ds`` once, span-corrupted, in the loader's seed-0 order: whole batches of
    ``batch_size``, then one batch of the rows left."""
    from llmpipe.data import TokenLoader
    from llmpipe.train.span_corruption import SpanCorruptionLoader

    n = len(ds)
    b = max(1, min(batch_size, n))
    full = n // b * b
    yield from SpanCorruptionLoader(
        TokenLoader(ds, b, seed=0, device=device, infinite=False, doc_ids=False, prefetch=1), corruptor
    )
    if full < n:  # the rest: a loader of n - full rows placed where the whole batches ended
        rest = TokenLoader(ds, n - full, seed=0, device=device, infinite=False, doc_ids=False, prefetch=1)
        rest.load_state_dict({**rest.state_dict(), "consumed": full})
        yield from SpanCorruptionLoader(rest, corruptor)
