"""``llmpipe export RUN --out HF_DIR``: a training run's checkpoint as a HuggingFace model directory."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "export",
        help="export a training run as a HuggingFace model (transformers, lm-eval, vLLM load it)",
        description="Write a run's checkpoint (default: the latest) as a HuggingFace LlamaForCausalLM "
        "directory: config.json, generation_config.json, safetensors weights (sharded with "
        "--max-shard-size), tokenizer.json, tokenizer_config.json and special_tokens_map.json.",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The export's arguments (also train/export_hf.py's); building the parser imports no torch."""
    p.add_argument("run_dir", type=Path, metavar="RUN", help="run directory of train/pretrain.py")
    p.add_argument("--out", type=Path, required=True, help="HF model directory to write")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json (default: the shards')")
    p.add_argument(
        "--max-shard-size",
        default=None,
        metavar="SIZE",
        help="split the weights into safetensors shards of at most SIZE (5GB, 500MB) with an index",
    )


def run(args: argparse.Namespace) -> int:
    from llmpipe.train.export_hf import run as export_run

    return export_run(args)
