"""``llmpipe plan``: per-GPU memory, compute and raw-data budgets before a training run."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from llmpipe.errors import ConfigError
from llmpipe.plan import (
    PEAK_TFLOPS,
    ModelShape,
    Optimizer,
    PipelineSchedule,
    PlanInput,
    Precision,
    Strategy,
    estimate,
    render,
    retention_from_curation,
)

if TYPE_CHECKING:
    from llmpipe.train.config import RunConfig


def _count(text: str) -> float:
    """'1.3B', '124M', '7e9', '2T' -> a number."""
    t = text.strip().upper()
    mult = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(t[-1:], 1.0)
    try:
        v = float(t[:-1] if mult != 1.0 else t) * mult
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (e.g. 124M, 1.3B, 7e9)") from e
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return v


def _positive(kind: type[int] | type[float], at_most: float | None = None) -> Any:
    """An argparse type: a number > 0 (and <= ``at_most``); zero or less is an error, not a default."""

    def parse(text: str) -> float:
        try:
            v = _count(text) if kind is float else int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v > 0 or (at_most is not None and v > at_most):
            where = f"in (0, {at_most:g}]" if at_most is not None else "> 0"
            raise argparse.ArgumentTypeError(f"must be {where}, got {text!r}")
        return v

    return parse


def _fraction(text: str) -> float:
    """An argparse type: a number in [0, 1]."""
    v = _count(text)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text!r}")
    return v


def _positive_count(text: str) -> float:
    v = _count(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def load_train_config(path: Path) -> RunConfig:
    """The trainer's own typed config (``llmpipe.train.config``): unknown keys and wrong types are
    ConfigErrors; ``path`` is a file or the name of a config that ships with llmpipe."""
    from llmpipe.train.config import load_config

    return load_config(path, [])


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "plan",
        help="memory per GPU, FLOPs, GPU-hours and raw data to crawl, before a run",
        description=(
            "Estimate per-GPU memory by component (weights, gradients, optimizer states, activations, "
            "temporaries), whether it fits, the largest micro-batch that fits, training FLOPs, "
            "petaFLOP/s-days and GPU-hours for a token budget, the compute-optimal token count "
            "(20 per parameter, or from a scaling fit: --scaling) and the raw tokens to crawl at a curation "
            "retention rate; with --tp / --pp / --cp, the layout's per-GPU memory, pipeline bubble fraction and "
            "communication volume per step. The formulas "
            "are in llmpipe/plan.py's docstring."
        ),
    )
    # a value such as -1B or -inf reaches its option's check (argparse takes only -1, -.5 for numbers)
    p._negative_number_matcher = re.compile(r"^-(inf|nan|(\d+\.?\d*|\.\d+)(e[-+]?\d+)?[kmbgt]?)$", re.I)
    m = p.add_mutually_exclusive_group(required=True)
    m.add_argument("--params", type=_positive_count, metavar="N", help="parameter count (e.g. 124M, 1B)")
    m.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a train config: a file, or a packaged name (tiny, gpt2-124m, llama-1b)",
    )
    p.add_argument(
        "--arch",
        choices=["decoder", "encoder", "encoder_decoder"],
        default=None,
        help="model.arch for --config (default: the config's): the encoder counts BERT's parameters, "
        "the encoder-decoder T5's (n_layers per stack)",
    )
    p.add_argument(
        "--vocab-size",
        type=_positive(int),
        metavar="V",
        help="vocabulary size for --config (default: its model.vocab_size, else 32000)",
    )
    p.add_argument("--gpus", type=_positive(int), default=1, metavar="N")
    p.add_argument(
        "--gpu-memory", type=_positive(float), default=80.0, metavar="GB", help="memory per GPU (default 80)"
    )
    p.add_argument("--gpu", choices=sorted(PEAK_TFLOPS), help="GPU type for peak TFLOP/s (default h100)")
    p.add_argument(
        "--peak-tflops", type=_positive(float), metavar="T", help="peak TFLOP/s per GPU (overrides --gpu)"
    )
    p.add_argument("--precision", choices=get_args(Precision), default="bf16")
    p.add_argument("--optimizer", choices=get_args(Optimizer), default="adamw")
    p.add_argument("--strategy", choices=get_args(Strategy), default="fsdp_full")
    p.add_argument(
        "--shard-size",
        type=_positive(int),
        metavar="N",
        help="fsdp_hybrid, zero*: ranks per shard group (default: all)",
    )
    p.add_argument("--cpu-offload", action="store_true", help="optimizer states in host memory")
    p.add_argument("--fused-optimizer", action="store_true", help="fused AdamW (no step temporaries)")
    p.add_argument(
        "--fused-loss",
        action="store_true",
        help="model.fused_loss: the output layer and the loss by chunks (no logits; default: the config's)",
    )
    p.add_argument("--seq-len", type=_positive(int), metavar="L")
    p.add_argument("--micro-batch", type=_positive(int), metavar="B", help="sequences per GPU per step")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument(
        "--trainable-fraction", type=_fraction, default=0.01, help="int8/int4: trainable share, 0 to 1"
    )
    p.add_argument(
        "--mfu", type=_positive(float, 1.0), default=0.4, help="model FLOPs utilisation assumed (default 0.4)"
    )
    p.add_argument("--tokens", type=_positive_count, metavar="T", help="training tokens (default 20 x N)")
    r = p.add_mutually_exclusive_group()
    r.add_argument(
        "--retention", type=_positive(float, 1.0), default=0.02, help="tokens kept by curation (default 0.02)"
    )
    r.add_argument(
        "--from-curation", type=Path, metavar="DIR", help="use the retention a curate run measured"
    )
    p.add_argument(
        "--tp", type=_positive(int), default=1, metavar="N", help="tensor-parallel ranks (default 1)"
    )
    p.add_argument(
        "--pp", type=_positive(int), default=1, metavar="N", help="pipeline-parallel ranks (default 1)"
    )
    p.add_argument(
        "--cp",
        type=_positive(int),
        default=1,
        metavar="N",
        help="context-parallel ranks: seq_len / N each (default 1)",
    )
    p.add_argument(
        "--microbatches",
        type=_positive(int),
        metavar="M",
        help="pipeline micro-batches (default pp x stages)",
    )
    p.add_argument("--pp-schedule", choices=get_args(PipelineSchedule), default="1f1b")
    p.add_argument("--stages-per-rank", type=_positive(int), metavar="V", help="interleaved: default 2")
    p.add_argument("--loss-parallel", action="store_true", help="tp: vocabulary-sharded logits")
    p.add_argument(
        "--ep",
        type=_positive(int),
        default=1,
        metavar="N",
        help="expert-parallel ranks for a config's model.moe",
    )
    p.add_argument(
        "--scaling",
        type=Path,
        metavar="FIT.json",
        help="compute-optimal tokens from a scaling fit (`llmpipe scaling`'s fit.json) instead of 20 x N",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    seq_len = args.seq_len or 0
    fused_loss = args.fused_loss
    if args.config is not None:
        model = load_train_config(args.config).model
        fused_loss = fused_loss or model.fused_loss
        model.arch = getattr(args, "arch", None) or model.arch
        shape = ModelShape.of(model, args.vocab_size or model.vocab_size or 32000)
        seq_len = seq_len or model.max_seq_len or 0
    else:
        shape = ModelShape(int(args.params))
    if fused_loss and (args.tp > 1 or args.pp > 1):
        raise ConfigError("--fused-loss does not run with --tp or --pp above 1 (the trainer refuses it)")
    if args.micro_batch and not seq_len:
        raise ConfigError("--micro-batch needs --seq-len (or a config with model.max_seq_len)")
    peak = args.peak_tflops or PEAK_TFLOPS[args.gpu or "h100"]
    retention = retention_from_curation(args.from_curation) if args.from_curation else args.retention
    optimal_tokens = 0.0
    if args.scaling is not None:
        from llmpipe.tune.scaling import load_fit

        optimal_tokens = load_fit(args.scaling).optimal_tokens(shape.params)
    plan = estimate(
        PlanInput(
            model=shape,
            gpus=args.gpus,
            gpu_memory_gb=args.gpu_memory,
            precision=args.precision,
            optimizer=args.optimizer,
            strategy=args.strategy,
            shard_size=args.shard_size or 0,
            cpu_offload=args.cpu_offload,
            fused_optimizer=args.fused_optimizer,
            seq_len=seq_len,
            micro_batch=args.micro_batch or 0,
            activation_checkpointing=args.activation_checkpointing,
            trainable_fraction=args.trainable_fraction,
            mfu=args.mfu,
            peak_tflops=peak,
            tokens=args.tokens or 0.0,
            retention=retention,
            tp=args.tp,
            pp=args.pp,
            cp=args.cp,
            microbatches=args.microbatches or 0,
            pp_schedule=args.pp_schedule,
            stages_per_rank=args.stages_per_rank or 0,
            loss_parallel=args.loss_parallel,
            fused_loss=fused_loss,
            ep=args.ep,
            optimal_tokens=optimal_tokens,
        )
    )
    print(json.dumps(plan.to_dict(), indent=2) if args.json else render(plan))
    return 0
