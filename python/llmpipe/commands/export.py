"""``llmpipe export RUN --out HF_DIR``: a training run's checkpoint as a HuggingFace model directory."""

from __future__ import annotations

import argparse

from llmpipe.train.export_args import add_arguments, export_inputs


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "export",
        help="export a training run as a HuggingFace model (transformers, lm-eval, vLLM load it)",
        description="Write a run's checkpoint (default: the latest) as a HuggingFace model directory "
        "of the run's architecture (a decoder as LlamaForCausalLM, or with experts as its mixture-of-"
        "experts model, an encoder as BertForMaskedLM, an encoder-decoder as T5ForConditionalGeneration, "
        "a LoRA run as a PEFT adapter): config.json, safetensors weights (sharded with --max-shard-size) "
        "and the tokenizer files.",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmpipe.train.rundir import EXPORT_OUT

    # before torch loads: a user's directory is not replaced, nor the run being read
    EXPORT_OUT.check(args.out, args.overwrite, inputs=export_inputs(args.run_dir, args.tokenizer))
    from llmpipe.train.export_hf import run as export_run

    return export_run(args)
