"""Export a run's checkpoint as a HuggingFace Llama model that the ecosystem loads.

    python -m llmpipe.train.export_hf RUN_DIR --out HF_DIR [--step N] [--max-shard-size 5GB]
    llmpipe export RUN_DIR --out HF_DIR            (the same, as a command)
    llmpipe export LORA_RUN --out DIR [--merge]    (a LoRA run: a PEFT adapter directory, or merged)

Writes config.json, generation_config.json, the weights (model.safetensors, or model-0000i-of-0000n
shards and model.safetensors.index.json above --max-shard-size), and the tokenizer: tokenizer.json,
tokenizer_config.json (``PreTrainedTokenizerFast``, so ``AutoTokenizer`` adds no BOS of its own) and
special_tokens_map.json (``<|endoftext|>``, the shards' EOS, as bos/eos/pad: documents are separated by
it in training, so it is the context before a document's first token).

The trainer's rotary layout is HF's (``rotate_half``), so export only renames tensors (train/hf.py). The result loads
with ``transformers.AutoModelForCausalLM.from_pretrained(HF_DIR)`` and gives the trainer's logits.
(Attention masking across packed documents is a training-time option; HF attends over the whole input.)
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch
from safetensors.torch import save_file

from llmpipe.config import load_yaml
from llmpipe.data.format import MANIFEST, TOKENIZER_FILE, check_tokenizer, read_manifest
from llmpipe.errors import LlmpipeError, TokenizerError
from llmpipe.outdir import apart_from_inputs, replaced_whole
from llmpipe.tokenizer import PAD
from llmpipe.train import encoder_hf, export_t5, init_from, lora
from llmpipe.train.arch import new_model
from llmpipe.train.checkpoint import STATE_FILE, check_step, chosen_checkpoint, load_dcp, load_train_state
from llmpipe.train.config import RunConfig, from_saved
from llmpipe.train.export_args import export_inputs
from llmpipe.train.hf import hf_config, hf_state_dict
from llmpipe.train.model import Transformer
from llmpipe.train.rundir import EXPORT_MARKER, EXPORT_OUT


def run_config(run_dir: Path) -> RunConfig:
    cfg_file = run_dir / "config.yaml"
    if not cfg_file.is_file():
        raise LlmpipeError(f"{run_dir}: no config.yaml; is this a run directory of the trainer?")
    return from_saved(load_yaml(cfg_file))


def load_run(
    run_dir: Path, step: int | None = None, *, merge: bool = True, encoder: bool = False
) -> tuple[RunConfig, Transformer, Path]:  # an Encoder for model.arch=encoder (train/encoder.py)
    """The run's config and its model (fp32, CPU, eval mode) from a checkpoint (default: the latest).

    A LoRA run's checkpoint holds adapters: the model is its base (``model.init_from``, refused if its
    files changed since) with the adapters merged into the weights, or (``merge=False``) kept as
    ``LoraLinear`` layers (train/lora.py)."""
    cfg = run_config(run_dir)
    arch = cfg.model.arch
    # the callers that take an encoder say so; an encoder-decoder loads by export_t5.load_t5
    if arch == "encoder_decoder" or (arch == "encoder" and not encoder):
        raise LlmpipeError(
            f"{run_dir} is an {arch} run (model.arch={arch}): `llmpipe export` and `llmpipe eval` take it; "
            "generation, quantization and pruning take decoders"
        )
    path = chosen_checkpoint(run_dir, step)
    model = new_model(cfg.model)
    if cfg.lora.rank:
        base = init_from.directory(cfg)
        if base is None or not base.is_dir():
            raise LlmpipeError(f"{run_dir} is a LoRA run whose base {base} is not a directory any more")
        lora.check_base(load_train_state(path / STATE_FILE), lora.base_reference(base), path)
        lora.apply_lora(model, cfg.lora)
        lora.load_base(model, base)
    state = {
        f"model.{k}": v
        for k, v in model.state_dict().items()
        if not cfg.lora.rank or lora.is_adapter(k)  # a LoRA checkpoint holds only the adapters
    }
    if cfg.model.tie_embeddings:
        state.pop("model.output.weight", None)  # the same tensor as the embedding
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        load_dcp(state, path, no_dist=True)  # runs no code from the run directory
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=False)
    if cfg.lora.rank and merge:
        lora.merge(model)
    model.eval()
    return cfg, model, path  # type: ignore[return-value]


def read_tokenizer(path: Path, fix: str = "pass --tokenizer FILE with a valid one") -> str:
    """The text of a tokenizer.json, refused with one line (ending in ``fix``) unless the
    ``tokenizers`` library (what ``AutoTokenizer`` loads it with) accepts it: an export must load
    where it is used, and a model directory's tokenizer is read only once it is known to load."""
    from tokenizers import Tokenizer

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: not a tokenizer.json (not UTF-8 text: {e.reason})") from None
    try:
        Tokenizer.from_str(text)
    except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exceptions
        why = (str(e).splitlines() or [type(e).__name__])[0][:300]
        raise TokenizerError(
            f"{path}: not a tokenizer that transformers' AutoTokenizer can load ({why}); {fix}"
        ) from None
    return text


def tokenizer_files(
    tokenizer_json: str,
    eos_id: int | None,
    max_len: int | None,
    mask_token: str | None = None,
    pad_token: str | None = None,
) -> dict[str, str]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json for ``AutoTokenizer``.

    The class is the generic ``PreTrainedTokenizerFast``: a llama config would otherwise make transformers
    choose ``LlamaTokenizerFast``, which prepends a ``<s>`` that is not in the vocabulary."""
    tok = json.loads(tokenizer_json)
    specials = {t["id"]: t["content"] for t in tok.get("added_tokens", []) if t.get("special")}
    eos = specials.get(eos_id) if eos_id is not None else None
    if eos is None and "<|endoftext|>" in specials.values():
        eos = "<|endoftext|>"
    names = {"bos_token": eos, "eos_token": eos, "pad_token": eos} if eos is not None else {}
    if mask_token is not None:  # the encoder's (train/mlm.py): fill-mask finds it by this name
        names["mask_token"] = mask_token
    if pad_token is not None:  # the encoder's reserved <pad> (llmpipe curate --special-tokens mlm)
        names["pad_token"] = pad_token
    config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **names,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": max_len or 1_000_000_000,
    }
    return {
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
        "special_tokens_map.json": json.dumps(names, indent=2) + "\n",
    }


def generation_config(eos_id: int | None) -> dict[str, object]:
    return {"bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": eos_id}


def save_weights(state: dict[str, torch.Tensor], out: Path, max_shard_size: int | str | None) -> list[str]:
    """One model.safetensors, or shards no larger than ``max_shard_size`` plus the index transformers reads."""
    if max_shard_size is None:
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
        return ["model.safetensors"]
    from huggingface_hub import split_torch_state_dict_into_shards

    split = split_torch_state_dict_into_shards(state, max_shard_size=max_shard_size)
    for name, keys in split.filename_to_tensors.items():
        save_file({k: state[k] for k in keys}, str(out / name), metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return sorted(split.filename_to_tensors)


def parse_size(text: str) -> int:
    """``5GB``, ``500MB``, ``2GiB`` or a byte count."""
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
    t = text.strip().upper()
    num = t.rstrip("KMGIB")
    unit = t[len(num) :]
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in units or value <= 0:
        raise LlmpipeError(f"--max-shard-size {text!r}: expected a size such as 5GB, 500MB or 2GiB")
    return int(value * units[unit])


def export(
    run_dir: Path,
    out: Path,
    *,
    step: int | None = None,
    tokenizer: Path | None = None,
    max_shard_size: int | str | None = None,
    merge: bool = False,
    overwrite: bool = False,
) -> Path:
    """The HF model directory of a run; a LoRA run's adapters as a PEFT directory, or with ``merge`` the
    base with the adapters merged in. ``out`` is replaced whole: one that holds files llmpipe did not
    write is refused unless ``overwrite``."""
    EXPORT_OUT.check(out, overwrite, inputs=export_inputs(run_dir, tokenizer))
    check_step(step)
    saved = run_config(run_dir)
    lora_run = bool(saved.lora.rank)
    t5_run = saved.model.arch == "encoder_decoder"  # T5ForConditionalGeneration (train/export_t5.py)
    adapters = lora_run and not merge
    if merge and not lora_run:
        raise LlmpipeError(f"--merge: {run_dir} is not a LoRA run; its export is the whole model already")
    model: Transformer | export_t5.T5  # or an Encoder (model.arch=encoder), from load_run
    if t5_run:
        cfg, (model, path) = saved, export_t5.load_t5(saved, run_dir, step)
    else:
        cfg, model, path = load_run(run_dir, step, merge=not adapters, encoder=True)
    shards = cfg.data.path or (
        cfg.data.sources[0].path if cfg.data.sources else None
    )  # a mixture: one tokenizer
    apart_from_inputs(out, {"the run's shards": shards})  # their tokenizer is read
    tok = tokenizer or (shards / TOKENIZER_FILE if shards else None)
    if tok is None or not tok.is_file():
        raise LlmpipeError(f"no tokenizer at {tok}; pass --tokenizer FILE")
    eos_id, manifest = None, None
    if shards is not None and (shards / MANIFEST).is_file():
        manifest = read_manifest(shards)
        eos_id = manifest["tokenizer"]["eos_id"]
        if tokenizer is None:  # the shards' own tokenizer: it must be the one they were made with
            check_tokenizer(shards, manifest)
    tok_json = read_tokenizer(tok)
    mask = cfg.mlm.mask_token if cfg.model.arch == "encoder" else None
    if mask is not None:
        assert cfg.mlm.mask_token_id is not None  # set at training start (train/mlm.py)
        tok_json = encoder_hf.with_mask_token(tok_json, cfg.mlm.mask_token_id, mask)
    added = {t["content"]: t["id"] for t in json.loads(tok_json).get("added_tokens", [])}
    pad = PAD if mask is not None and PAD in added else None  # else EOS pads, as in training
    ids = list(added.values())
    ids += list(json.loads(tok_json).get("model", {}).get("vocab", {}).values())
    vocab = cfg.model.vocab_size or 0
    if ids and max(ids) >= vocab:
        raise LlmpipeError(f"{tok}: token id {max(ids)} is outside the model's vocabulary of {vocab}")
    if eos_id is None:
        eos_id = next((t["id"] for t in json.loads(tok_json).get("added_tokens", [])
                       if t["content"] == "<|endoftext|>"), None)  # fmt: skip
    with replaced_whole(out) as tmp:
        if isinstance(model, export_t5.T5):
            if manifest is None or eos_id is None:
                raise LlmpipeError(f"{run_dir}: an encoder-decoder export needs the run's shards ({shards})")
            weights = export_t5.write_dir(cfg, model, tmp, tok_json, manifest["seq_len"], eos_id)
            save_weights(weights, tmp, max_shard_size)
        elif adapters:  # PEFT's adapter directory: PeftModel.from_pretrained(base, out)
            lora.peft_dir(model, cfg.lora, str(init_from.directory(cfg)), tmp)
        elif mask is not None:  # the encoder: BertForMaskedLM
            save_weights(encoder_hf.bert_state_dict(model), tmp, max_shard_size)  # type: ignore[arg-type]
            pad_id = added[pad] if pad is not None else eos_id
            bert = encoder_hf.bert_config(cfg.model, mask_id=cfg.mlm.mask_token_id or 0, pad_id=pad_id)
            (tmp / "config.json").write_text(json.dumps(bert, indent=2) + "\n")
        else:
            save_weights(hf_state_dict(model), tmp, max_shard_size)
            (tmp / "config.json").write_text(json.dumps(hf_config(cfg.model, eos_id), indent=2) + "\n")
            (tmp / "generation_config.json").write_text(
                json.dumps(generation_config(eos_id), indent=2) + "\n"
            )
        for name, text in tokenizer_files(tok_json, eos_id, cfg.model.max_seq_len, mask, pad).items():
            if not t5_run:  # export_t5 wrote its own, with the sentinels
                (tmp / name).write_text(text, encoding="utf-8")
        (tmp / EXPORT_MARKER).write_text(json.dumps({"run": str(run_dir), "checkpoint": path.name}) + "\n")
    return path


def run(args: argparse.Namespace) -> int:
    """Export as ``args`` say; raises LlmpipeError on bad input."""
    size = parse_size(args.max_shard_size) if args.max_shard_size else None
    path = export(
        args.run_dir,
        args.out,
        step=args.step,
        tokenizer=args.tokenizer,
        max_shard_size=size,
        merge=args.merge,
        overwrite=args.overwrite,
    )
    print(f"exported {path} -> {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from llmpipe.train.export_args import add_arguments

    p = argparse.ArgumentParser(description="Export a training run as a HuggingFace Llama checkpoint.")
    add_arguments(p)
    try:
        return run(p.parse_args(argv))
    except LlmpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
