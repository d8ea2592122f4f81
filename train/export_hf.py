"""Export a run's checkpoint as a HuggingFace Llama model: model.safetensors, config.json, tokenizer.json.

    python train/export_hf.py RUN_DIR --out HF_DIR [--step N]

The trainer's rotary layout is HF's (``rotate_half``), so export only renames tensors. The result loads
with ``transformers.AutoModelForCausalLM.from_pretrained(HF_DIR)`` and gives the trainer's logits.
(Attention masking across packed documents is a training-time option; HF attends over the whole input.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import warnings
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed.checkpoint as dcp
from llmpipe.config import load_yaml
from llmpipe.data.format import MANIFEST, TOKENIZER_FILE
from llmpipe.errors import LlmpipeError
from safetensors.torch import save_file

from train.checkpoint import list_checkpoints, step_dir
from train.config import RunConfig, from_saved
from train.model import Transformer

_LAYER = {
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


def load_run(run_dir: Path, step: int | None = None) -> tuple[RunConfig, Transformer, Path]:
    """The run's config and its model (fp32, CPU, eval mode) from a checkpoint (default: the latest)."""
    cfg_file = run_dir / "config.yaml"
    if not cfg_file.is_file():
        raise LlmpipeError(f"{run_dir}: no config.yaml; is this a run directory of train/pretrain.py?")
    cfg = from_saved(load_yaml(cfg_file))
    found = list_checkpoints(run_dir / "checkpoints")
    if step is not None:
        path = step_dir(run_dir / "checkpoints", step)
        if path not in found:
            raise LlmpipeError(f"{path}: no such checkpoint (have {[p.name for p in found]})")
    elif not found:
        raise LlmpipeError(f"{run_dir}/checkpoints: no checkpoint yet")
    else:
        path = found[-1]
    model = Transformer(cfg.model)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    if cfg.model.tie_embeddings:
        state.pop("model.output.weight", None)  # the same tensor as the embedding
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(path), no_dist=True)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=False)
    model.eval()
    return cfg, model, path


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        if name == "tok_embeddings.weight":
            key = "model.embed_tokens.weight"
        elif name == "norm.weight":
            key = "model.norm.weight"
        elif name == "output.weight":
            if model.cfg.tie_embeddings:
                continue
            key = "lm_head.weight"
        else:
            _, i, rest = name.split(".", 2)
            module, param = rest.rsplit(".", 1)
            key = f"model.layers.{i}.{_LAYER[module]}.{param}"
        out[key] = t.detach().to(torch.float32).contiguous().clone()
    return out


def hf_config(cfg: RunConfig, eos_id: int | None) -> dict[str, object]:
    m = cfg.model
    return {
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
        "torch_dtype": "float32",
        "use_cache": True,
    }


def export(run_dir: Path, out: Path, *, step: int | None = None, tokenizer: Path | None = None) -> Path:
    cfg, model, path = load_run(run_dir, step)
    shards = cfg.data.path or (
        cfg.data.sources[0].path if cfg.data.sources else None
    )  # a mixture: one tokenizer
    tok = tokenizer or (shards / TOKENIZER_FILE if shards else None)
    if tok is None or not tok.is_file():
        raise LlmpipeError(f"no tokenizer at {tok}; pass --tokenizer FILE")
    eos_id = None
    if shards is not None and (shards / MANIFEST).is_file():
        eos_id = json.loads((shards / MANIFEST).read_text())["tokenizer"]["eos_id"]
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(hf_state_dict(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(hf_config(cfg, eos_id), indent=2) + "\n")
    shutil.copyfile(tok, tmp / "tokenizer.json")
    (tmp / "llmpipe_export.json").write_text(
        json.dumps({"run": str(run_dir), "checkpoint": path.name}) + "\n"
    )
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Export a training run as a HuggingFace Llama checkpoint.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, required=True, help="HF model directory to write")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json (default: the shards')")
    args = p.parse_args(argv)
    try:
        path = export(args.run_dir, args.out, step=args.step, tokenizer=args.tokenizer)
    except LlmpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"exported {path} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
