"""The run's typed configuration: one dataclass per component, loaded from YAML plus ``--key=value``.

``configs/train/*.yaml`` holds sections (model, data, optim, parallel, train, checkpoint, guard, metrics,
debug, eval, qat, init, lora, mlm, span). Every key not given takes the default below. Unknown keys and
wrong types are a ConfigError, in the file and in overrides alike. An override is ``--section.key=value`` or,
when the key name is unique across sections, ``--key=value``; the value is parsed as YAML (``--train.steps=20``,
``--doc_mask=true``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import yaml

from llmpipe.config import config_file, from_dict, load_yaml, to_dict, yaml_problem
from llmpipe.errors import ConfigError
from llmpipe.train.model import ModelConfig
from llmpipe.train.span_corruption import SpanConfig

_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


@dataclass
class SourceConfig:
    """One source of a weighted mixture (``--data name=path:weight``)."""

    name: str = ""
    path: Path | None = None  # its shard directory
    weight: float = 1.0  # share of target tokens (normalised over the sources)
    max_epochs: int = 0  # passes over the source before it is exhausted; 0: repeated without limit


@dataclass
class StageConfig:
    """From optimizer step ``from_step`` on, the mixture takes these weights (source name -> weight)."""

    from_step: int = 0
    weights: dict[str, float] = field(default_factory=dict)


@dataclass
class DataConfig:
    path: Path | None = None  # the shard directory (``--data``)
    batch_size: int = 8  # sequences per rank per micro-batch
    seed: int = 0  # data order
    # shard checks at start: blocks = CRC-32 of every 1 MiB block (every byte; old manifests: as fast),
    # full = sha256 of every byte, fast = size + first/last MiB (misses a byte mid-shard), none
    verify: Literal["blocks", "full", "fast", "none"] = "blocks"
    prefetch: int = 4
    sources: list[SourceConfig] = field(default_factory=list)  # a weighted mixture instead of ``path``
    stages: list[StageConfig] = field(default_factory=list)  # later mixtures (e.g. anneal on one source)
    on_exhausted: Literal["stop", "renormalize"] = "stop"  # when a source passes its max_epochs


@dataclass
class OptimConfig:
    lr: float = 3e-4  # peak learning rate
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1  # matrices only: never norms or biases
    decay_embeddings: bool = False  # whether the embedding (and a tied output) matrix decays
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    warmup_steps: int = 100  # linear warmup from 0, then the schedule to min_lr_ratio * lr at train.steps
    min_lr_ratio: float = 0.1
    schedule: Literal["cosine", "linear", "wsd", "constant"] = "cosine"  # after the warmup
    decay_fraction: float = 0.2  # wsd: the last fraction of train.steps decays linearly to the minimum
    batch_lr: Literal["sqrt", "linear", "none"] = "sqrt"  # lr scaling with a ramped batch (train.ramp_*)
    fused: bool | Literal["auto"] = "auto"  # fused AdamW kernel; auto: on CUDA


@dataclass
class ParallelConfig:
    """The layout is a mesh ``pp x dp_replicate x dp_shard x cp x tp`` whose product is the world size
    (train/parallel.py). ``sharding`` fills the data-parallel sizes when both are 0: ``full``: dp_shard
    = all data-parallel ranks; ``none``: dp_replicate = all; ``hybrid``: dp_shard = ``shard_size``."""

    sharding: Literal["full", "hybrid", "none"] = "full"  # FSDP / HSDP (2-D mesh) / replicate
    # ZeRO stage over the dp_shard ranks (train/zero.py): 1 optimizer states, 2 + gradients, 3 + parameters;
    # 0: from sharding (full / hybrid: 3, none: nothing sharded)
    zero: Literal[0, 1, 2, 3] = 0
    shard_size: int = 0  # hybrid: ranks per shard group (0: ranks per node = LOCAL_WORLD_SIZE)
    dp_replicate: int = 0  # data-parallel replicas (gradients all-reduced); 0: from sharding
    dp_shard: int = 0  # ranks each replica's parameters are sharded over (FSDP2); 0: from sharding
    tp: int = 1  # tensor parallel: heads and the MLP hidden split over tp ranks (DTensor)
    ep: int = 1  # expert parallel: model.moe's experts split over ep ranks taken from dp_shard (train/moe.py)
    cp: int = 1  # context parallel: each sequence split over cp ranks (train/context_parallel.py)
    loss_parallel: bool = False  # tp: cross entropy on vocabulary-sharded logits (no logits gather)
    pp: int = 1  # pipeline parallel: layers split into stages on pp ranks
    pp_schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = "1f1b"
    pp_microbatches: int = 0  # micro-batches per pipeline step (0: pp x stages per rank)
    pp_stages_per_rank: int = 0  # 0: 1 (gpipe, 1f1b) or 2 (interleaved_1f1b)
    cpu_offload: bool = False  # FSDP2 CPUOffloadPolicy: sharded parameters, gradients, optimizer on host
    mixed_precision: Literal["bf16", "fp16", "fp32"] = "bf16"  # fp16: with a gradient scaler
    fp16_init_scale: float = 65536.0  # fp16: initial loss scale (halved on overflow, doubled when stable)
    fp16_growth_interval: int = 200  # fp16: steps without overflow before the scale doubles
    activation_checkpointing: bool = False
    checkpoint_every: int = 1  # with activation_checkpointing: recompute blocks 0, N, 2N, ... (selective)
    compile: bool | Literal["auto"] = "auto"  # torch.compile each block; auto: on CUDA
    float8: bool = False  # torchao float8 training for the blocks' linear layers (CUDA, compute 8.9+)
    backend: Literal["auto", "gloo", "nccl"] = "auto"  # auto: nccl on CUDA, gloo on CPU
    device: Literal["auto", "cpu", "cuda"] = "auto"


@dataclass
class LoopConfig:
    steps: int = 100  # optimizer steps
    grad_accum: int = 1  # micro-batches per optimizer step (the full batch when ramping)
    ramp_tokens: int = 0  # batch-size ramp: tokens over which the batch grows to grad_accum; 0: off
    ramp_start: int = 1  # ramp: micro-batches per step at the start, doubled up to grad_accum
    seed: int = 0  # weight init
    log_every: int = 10
    val_every: int = 50  # 0: only at the end
    val_batches: int = 4  # per rank


@dataclass
class CheckpointConfig:
    every: int = 0  # steps between checkpoints; 0: only the final one
    keep: int = 3  # keep the last K checkpoints
    async_save: bool = True  # periodic saves in the background on a dedicated gloo group
    resume: bool = True  # resume from the latest checkpoint in RUN_DIR/checkpoints


@dataclass
class GuardConfig:
    enabled: bool = True
    factor: float = 3.0  # a loss above factor x running average is a spike
    warmup: int = 20  # steps before the guard judges
    ema: float = 0.95  # running average weight
    max_spikes: int = 3  # consecutive spikes before rolling back to the last checkpoint
    #: rollbacks (or attempts without a checkpoint) before a new checkpoint is reached; one more and
    #: the run stops as diverged (exit code 3)
    max_rollbacks: int = 3


@dataclass
class MetricsConfig:
    tensorboard: bool = True
    peak_tflops: float = 0.0  # per device, for MFU; 0: looked up from the device name (docs/training.md)


@dataclass
class DebugConfig:
    inject_spike_at_step: list[int] = field(default_factory=list)  # scale the loss x1000 at these steps
    inject_spike_repeat: int = 1  # batches spiked at each such step (>= guard.max_spikes: rollback)
    stop_after_step: int = 0  # exit after this step as if killed (after any checkpoint due); 0: off
    inject_overflow_at_step: list[int] = field(default_factory=list)  # an inf gradient (fp16 scaler test)
    dump_grads: bool = False  # write the first step's full gradients to RUN_DIR/grads/rank-N.pt


@dataclass
class EvalConfig:
    """Bits per byte on named text sets during training (llmpipe.eval; docs/evaluation.md)."""

    every: int = 0  # steps between evaluations (and at the last step); 0: off
    sets: dict[str, str] = field(default_factory=dict)  # name -> .txt (one document) or .jsonl[.gz] file
    max_docs: int = 200  # documents per set
    batch_size: int = 8  # windows per forward pass, per rank


@dataclass
class QatConfig:
    scheme: Literal["none", "int4", "int8"] = "none"  # fake-quantize weights in training (torchao QAT)
    group_size: int = 64  # int4: weights per scale; `llmpipe quantize RUN` converts with the same
    from_step: int = 0  # fake quantization on from this optimizer step


#: the linear layers LoRA may adapt, by their names in HF Llama modules (train/hf.py maps them to ours)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class LoraConfig:
    """LoRA / QLoRA fine-tuning of a base (``model.init_from``): the base frozen, low-rank adapters trained
    (train/lora.py, docs/training.md)."""

    rank: int = 0  # adapter rank r; 0: off (every parameter trains)
    alpha: float = 16.0  # the adapter's output is scaled by alpha / rank
    dropout: float = 0.0  # dropout on the adapter's input, in training only
    targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))  # HF Llama module names
    base_quant: Literal["none", "nf4"] = "none"  # nf4: QLoRA, the frozen base linear weights in NF4


@dataclass
class MlmConfig:
    """Masked-LM masking for ``model.arch=encoder`` (train/mlm.py), RoBERTa's recipe by default: of the
    tokens chosen, ``mask_replace`` become ``<mask>``, ``random_replace`` a random token, the rest stay."""

    mask_prob: float = 0.15  # share of the tokens (EOS and padding never) the loss predicts
    mask_replace: float = 0.8
    random_replace: float = 0.1
    whole_word: bool = False  # choose whole words (a word starts at a token that begins with whitespace)
    seed: int = 0  # the masks are drawn from (seed, step, position in the global batch, token position)
    mask_token: str = "<mask>"
    #: set at training start: the tokenizer's ``mask_token``, or else the first id it does not use (the
    #: model's vocabulary grows to hold it); recorded in the run's config.yaml, used by export
    mask_token_id: int | None = None


@dataclass
class InitConfig:
    from_hf: Path | None = None  # the older name of model.init_from (train/init_from.py): the same feature


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    train: LoopConfig = field(default_factory=LoopConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    qat: QatConfig = field(default_factory=QatConfig)
    init: InitConfig = field(default_factory=InitConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    mlm: MlmConfig = field(default_factory=MlmConfig)  # model.arch=encoder
    span: SpanConfig = field(default_factory=SpanConfig)  # model.arch=encoder_decoder


def _sections() -> dict[str, set[str]]:
    default = RunConfig()
    return {
        f.name: {g.name for g in dataclasses.fields(getattr(default, f.name))}
        for f in dataclasses.fields(default)
    }


def apply_override(data: dict[str, Any], item: str) -> None:
    """Apply ``section.key=value`` or ``key=value`` (unique key) to the raw config mapping."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected --key=value or --section.key=value")
    key, raw = item.split("=", 1)
    sections = _sections()
    if "." in key:
        section, name = key.split(".", 1)
        if section not in sections:
            raise ConfigError(f"override {item!r}: no section {section!r} (have {sorted(sections)})")
    else:
        owners = [s for s, names in sections.items() if key in names]
        if len(owners) != 1:
            where = f"in sections {owners}" if owners else "in no section"
            raise ConfigError(f"override {item!r}: key {key!r} is {where}; write --section.{key}=...")
        section, name = owners[0], key
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"override {item!r}: value is not valid YAML{yaml_problem(e)}") from e
    if isinstance(value, str) and _FLOAT.match(value):  # YAML 1.1 reads 1e-3 as a string
        value = float(value)
    *inner, name = name.split(".")  # a nested section: --model.moe.experts=8
    sect: Any = data
    for depth, part in enumerate([section, *inner], 1):
        sect = sect.setdefault(part, {})
        if not isinstance(sect, dict):
            where = ".".join([section, *inner][:depth])
            raise ConfigError(f"config section {where!r} must be a mapping")
    sect[name] = value


def load_config(path: str | Path | None, overrides: list[str]) -> RunConfig:
    data: dict[str, Any] = load_yaml(config_file(path, "train")) if path is not None else {}
    for item in overrides:
        apply_override(data, item)
    return from_dict(RunConfig, data, "config")


def entry_name() -> str:
    """The trainer as it was invoked, for its usage line: ``python -m llmpipe.train`` (torchrun's
    ``-m llmpipe.train`` too) or the script's name (train/pretrain.py)."""
    import sys

    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "python -m llmpipe.train" if script in ("__main__.py", "-m", "-c", "") else script


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, RunConfig]:
    p = argparse.ArgumentParser(
        prog=entry_name(),
        description="Train a decoder on llmpipe shards (run under torchrun).",
        epilog="Any other --section.key=value (or unique --key=value) overrides the config.",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML config: a file, or the name of one that ships with llmpipe (tiny, gpt2-124m, llama-1b)",
    )
    p.add_argument(
        "--data",
        action="append",
        default=None,
        metavar="DIR | NAME=DIR:WEIGHT",
        help="shard directory written by `llmpipe curate`; repeat NAME=DIR:WEIGHT to mix sources",
    )
    p.add_argument("--out", type=Path, required=True, help="run directory: checkpoints, logs, config")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even when it holds files llmpipe did not write (default: refused)",
    )
    args, rest = p.parse_known_args(argv)
    overrides = []
    for item in rest:
        if not item.startswith("--"):
            raise ConfigError(f"unexpected argument {item!r}; overrides look like --section.key=value")
        overrides.append(item[2:])
    cfg = load_config(args.config, overrides)
    if args.data:
        apply_data_args(cfg.data, args.data)
    if cfg.data.path is None and not cfg.data.sources:
        raise ConfigError("no shard directory: pass --data DIR (or set data.path in the config)")
    validate(cfg)
    absolute_paths(cfg)
    return args, cfg


def absolute_paths(cfg: RunConfig) -> None:
    """The paths a run names, made absolute: the run directory's config.yaml then works from any directory
    (export, eval, quantize and resume read it later, often from elsewhere)."""
    if cfg.data.path is not None:
        cfg.data.path = cfg.data.path.absolute()
    for s in cfg.data.sources:
        if s.path is not None:
            s.path = s.path.absolute()
    if cfg.init.from_hf is not None:
        cfg.init.from_hf = cfg.init.from_hf.absolute()
    if cfg.model.init_from:
        cfg.model.init_from = str(Path(cfg.model.init_from).absolute())
    cfg.eval.sets = {name: str(Path(path).absolute()) for name, path in cfg.eval.sets.items()}


_SOURCE = re.compile(r"^([A-Za-z0-9_.-]+)=(.+)$")


def parse_source(item: str) -> SourceConfig:
    """``NAME=DIR:WEIGHT`` (or ``NAME=DIR``, weight 1) as a mixture source."""
    m = _SOURCE.match(item)
    if m is None:
        raise ConfigError(f"--data {item!r}: expected DIR or NAME=DIR:WEIGHT")
    name, rest = m.groups()
    path, weight = rest, 1.0
    if ":" in rest and not Path(rest).exists():  # a directory whose name holds ':' is taken whole
        head, tail = rest.rsplit(":", 1)
        try:
            path, weight = head, float(tail)
        except ValueError:
            raise ConfigError(
                f"--data {item!r}: the weight {tail!r} is not a number (NAME=DIR:WEIGHT)"
            ) from None
        if not math.isfinite(weight) or weight < 0:
            raise ConfigError(
                f"--data {item!r}: the weight must be a finite non-negative number, got {tail!r}"
            )
    return SourceConfig(name=name, path=Path(path), weight=weight)


def apply_data_args(data: DataConfig, items: list[str]) -> None:
    """``--data DIR`` once, or ``--data NAME=DIR:WEIGHT`` once per source (replacing data.sources)."""
    if len(items) == 1 and _SOURCE.match(items[0]) is None:
        data.path, data.sources = Path(items[0]), []
        return
    data.path, data.sources = None, [parse_source(item) for item in items]


def validate_mixture(data: DataConfig) -> None:
    if not data.sources:
        if data.stages:
            raise ConfigError("data.stages needs data.sources (a mixture)")
        return
    if data.path is not None:
        raise ConfigError("set data.path (one directory) or data.sources (a mixture), not both")
    names = [s.name for s in data.sources]
    for i, s in enumerate(data.sources):
        if not s.name or s.path is None:
            raise ConfigError(f"data.sources[{i}]: every source needs a name and a path")
        if not math.isfinite(s.weight) or s.weight < 0 or s.max_epochs < 0:
            raise ConfigError(
                f"data.sources[{i}] ({s.name}): the weight must be a finite non-negative number, "
                "max_epochs >= 0"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"data.sources: names must be unique, got {names}")
    if sum(s.weight for s in data.sources) <= 0:
        raise ConfigError("data.sources: the weights sum to zero")
    last = 0
    for i, st in enumerate(data.stages):
        if st.from_step <= last:
            raise ConfigError(f"data.stages[{i}]: from_step must be above 0 and increasing")
        last = st.from_step
        unknown = sorted(set(st.weights) - set(names))
        if unknown:
            raise ConfigError(f"data.stages[{i}]: unknown source(s) {unknown}; sources are {names}")
        if any(not isinstance(w, int | float) or not math.isfinite(w) or w < 0 for w in st.weights.values()):
            raise ConfigError(f"data.stages[{i}]: weights must be finite non-negative numbers")
        if sum(st.weights.values()) <= 0:
            raise ConfigError(f"data.stages[{i}]: the weights sum to zero")


def validate_lora(cfg: RunConfig) -> None:
    lo = cfg.lora
    if lo.rank < 0 or lo.alpha <= 0 or not 0 <= lo.dropout < 1:
        raise ConfigError("lora.rank must be >= 0, lora.alpha positive, lora.dropout in [0, 1)")
    if not lo.rank:
        if lo.base_quant != "none":
            raise ConfigError("lora.base_quant needs lora.rank > 0 (QLoRA trains adapters on the base)")
        return
    unknown = sorted(set(lo.targets) - set(LORA_TARGETS))
    if unknown or not lo.targets or len(set(lo.targets)) != len(lo.targets):
        raise ConfigError(
            f"lora.targets {lo.targets}: name each of these at most once: {', '.join(LORA_TARGETS)}"
        )
    if not cfg.model.init_from and cfg.init.from_hf is None:
        raise ConfigError("lora.rank needs model.init_from=HF_DIR: the base model the adapters fine-tune")
    p = cfg.parallel
    if p.tp > 1 or p.pp > 1 or p.float8 or cfg.qat.scheme != "none":
        raise ConfigError("lora runs with parallel.tp=1, parallel.pp=1, no parallel.float8 and no qat")


def validate_encoder(cfg: RunConfig) -> None:
    m = cfg.mlm
    if not (0 < m.mask_prob < 1 and m.mask_replace >= 0 and m.random_replace >= 0):
        raise ConfigError("mlm.mask_prob must be in (0, 1), mlm.mask_replace and mlm.random_replace >= 0")
    if m.mask_replace + m.random_replace > 1:
        raise ConfigError("mlm.mask_replace + mlm.random_replace must be at most 1")
    if cfg.model.arch != "encoder":
        return
    unsupported = [
        (cfg.parallel.pp > 1, "parallel.pp > 1"),
        (cfg.parallel.cp > 1, "parallel.cp > 1 (its load-balanced split is for causal attention)"),
        (bool(cfg.lora.rank), "lora"),
        (bool(cfg.eval.every), "eval.every (bits per byte is a causal measure)"),
        (cfg.init.from_hf is not None, "init.from_hf"),
        (cfg.qat.scheme != "none", "qat"),
        (cfg.parallel.float8, "parallel.float8"),
    ]
    for bad, what in unsupported:
        if bad:
            raise ConfigError(f"model.arch=encoder does not run with {what}")


def validate_fused_loss(cfg: RunConfig) -> None:
    """``model.fused_loss`` replaces the output layer and the loss of ``forward_backward`` (train/loss.py):
    refused where the loss is computed elsewhere or the output layer is not a plain decoder's matrix."""
    if not cfg.model.fused_loss:
        return
    unsupported = [
        (cfg.model.arch != "decoder", f"model.arch={cfg.model.arch} (the decoder's output layer only)"),
        (cfg.parallel.pp > 1, "parallel.pp > 1 (the last pipeline stage computes its loss on the logits)"),
        (cfg.parallel.tp > 1, "parallel.tp > 1 (the output layer is sharded over the vocabulary)"),
        (
            cfg.parallel.mixed_precision == "fp16",
            "parallel.mixed_precision=fp16 (its gradients are computed before the loss scale; use bf16)",
        ),
        (cfg.qat.scheme != "none", "qat (the output layer's fake quantizer is in the forward it skips)"),
    ]
    for bad, what in unsupported:
        if bad:
            raise ConfigError(f"model.fused_loss does not run with {what}")


def validate(cfg: RunConfig) -> None:
    validate_mixture(cfg.data)
    validate_lora(cfg)
    validate_encoder(cfg)
    validate_fused_loss(cfg)
    checks = [
        (cfg.train.steps > 0, "train.steps must be positive"),
        (cfg.train.grad_accum > 0, "train.grad_accum must be positive"),
        (cfg.data.batch_size > 0, "data.batch_size must be positive"),
        (cfg.checkpoint.keep > 0, "checkpoint.keep must be at least 1"),
        (cfg.checkpoint.every >= 0, "checkpoint.every must be >= 0 (0: only the final checkpoint)"),
        (math.isfinite(cfg.optim.lr) and cfg.optim.lr >= 0, "optim.lr must be a finite number >= 0"),
        (
            0 <= cfg.optim.beta1 < 1 and 0 <= cfg.optim.beta2 < 1,
            "optim.beta1 and optim.beta2 must be in [0, 1)",
        ),
        (cfg.optim.eps > 0, "optim.eps must be positive"),
        (cfg.optim.weight_decay >= 0, "optim.weight_decay must be >= 0"),
        (
            0 <= cfg.guard.ema < 1,
            "guard.ema must be in [0, 1) (the running average's weight on itself; 1 would never update it)",
        ),
        (cfg.train.val_every >= 0, "train.val_every must be >= 0 (0: only at the end)"),
        (0 <= cfg.optim.min_lr_ratio <= 1, "optim.min_lr_ratio must be in [0, 1]"),
        (0 < cfg.optim.decay_fraction <= 1, "optim.decay_fraction must be in (0, 1]"),
        (cfg.train.ramp_tokens >= 0, "train.ramp_tokens must be >= 0"),
        (cfg.train.ramp_start > 0, "train.ramp_start must be positive"),
        (cfg.guard.factor > 1, "guard.factor must be above 1"),
        (cfg.train.log_every > 0, "train.log_every must be positive"),
        (
            cfg.train.val_batches > 0,
            "train.val_batches must be at least 1 (train.val_every=0: only at the end)",
        ),
        (cfg.parallel.checkpoint_every > 0, "parallel.checkpoint_every must be positive"),
        (
            cfg.model.attention != "flex" or cfg.model.doc_mask,
            "model.attention=flex applies the document mask: set model.doc_mask=true (unmasked is causal SDPA)",
        ),
        (cfg.eval.every >= 0 and cfg.eval.max_docs > 0, "eval.every must be >= 0, eval.max_docs positive"),
        (cfg.eval.batch_size > 0, "eval.batch_size must be positive"),
        (not cfg.eval.every or bool(cfg.eval.sets), "eval.every needs eval.sets (name: text file)"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)
    for name, path in cfg.eval.sets.items():
        if not isinstance(path, str) or not Path(path).is_file():
            raise ConfigError(f"eval.sets.{name}: {path!r} is not a file")


def resolve_for_device(cfg: RunConfig, device: torch.device) -> None:
    """Settle the "auto" keys for the run's device (compile and fused AdamW on CUDA) and refuse what the
    device cannot do: FlexAttention training and float8 outside CUDA, float8 below compute capability 8.9."""
    cuda = device.type == "cuda"
    if cfg.parallel.compile == "auto":
        cfg.parallel.compile = cuda
    if cfg.optim.fused == "auto":
        cfg.optim.fused = cuda
    if cfg.model.attention == "flex" and not cuda:
        raise ConfigError(
            f"model.attention=flex trains only on CUDA (torch has no FlexAttention backward on {device.type}); "
            "use model.attention=sdpa or auto"
        )
    if cfg.parallel.float8:
        cap = torch.cuda.get_device_capability(device) if cuda else None
        if cap is None or cap < (8, 9):
            where = f"compute capability {cap[0]}.{cap[1]}" if cap else device.type
            raise ConfigError(
                f"parallel.float8 needs a CUDA GPU with float8 matmuls (compute capability 8.9+, e.g. H100); "
                f"this run is on {where}"
            )


def dump(cfg: RunConfig) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def from_saved(data: Any) -> RunConfig:
    """The config saved in a run directory (``config.yaml``): a mapping of known keys whose model has
    the vocabulary size and context length the trainer filled in from its shards."""
    if not isinstance(data, dict):
        raise ConfigError(f"saved config: expected a mapping, got {type(data).__name__}")
    cfg = from_dict(RunConfig, data, "saved config")
    if cfg.model.vocab_size is None or cfg.model.max_seq_len is None:
        raise ConfigError(
            "saved config: model.vocab_size and model.max_seq_len are not set (the trainer writes both "
            "into a run's config.yaml): not a run's own config, or hand-edited"
        )
    return cfg
