"""Pretrain a decoder on llmpipe shards.

    torchrun --nproc_per_node=N train/pretrain.py --data SHARDS --config configs/train/tiny.yaml --out RUN

Composes the parts: config -> process group -> data -> model (meta init, FSDP2, weights) -> optimizer ->
checkpoint (resume from the latest) -> the loop. See docs/training.md.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from llmpipe.compress.training import TrainCompression
from llmpipe.data.format import TOKENIZER_FILE
from llmpipe.errors import LlmpipeError
from llmpipe.lock import DirLock
from llmpipe.plan import Plan, plan_for_run, render_memory
from llmpipe.train import init_from, lora, mlm, t5, zero
from llmpipe.train.arch import new_model
from llmpipe.train.checkpoint import STATE_FILE, Checkpointer, load_train_state
from llmpipe.train.config import RunConfig, dump, parse_args, resolve_for_device
from llmpipe.train.data import build_data, first_directory, open_train, val_notices, verify_notices
from llmpipe.train.metrics import MetricsWriter, Throughput, flops_per_token, peak_tflops
from llmpipe.train.model import Transformer, _local, count_params
from llmpipe.train.moe import inactive_params
from llmpipe.train.optim import build_optimizer, build_scheduler
from llmpipe.train.parallel import (
    Dist,
    all_reduce_sum,
    apply_float8,
    init_distributed,
    microbatches,
    parallelize,
)
from llmpipe.train.pipeline import Pipeline
from llmpipe.train.rundir import RUN_DIR
from llmpipe.train.schedule import BatchSchedule
from llmpipe.train.span_corruption import SpanCorruptionLoader
from llmpipe.train.text_eval import TextEval
from llmpipe.train.trainer import Trainer


def compression_hooks(cfg: RunConfig) -> TrainCompression:
    q = cfg.qat
    return TrainCompression(q.scheme, q.group_size, q.from_step)


def build_model(cfg: RunConfig, d: Dist, hooks: TrainCompression | None = None) -> torch.nn.Module:
    """Build on the meta device, parallelise (TP, then FSDP), then allocate only this rank's shards and
    initialise them (QAT fake quantizers go in before sharding)."""
    hooks = hooks or compression_hooks(cfg)
    with torch.device("meta"):
        model = new_model(cfg.model)
    hooks.prepare(model)
    if cfg.lora.rank:
        lora.apply_lora(model, cfg.lora)  # the base frozen, adapters in the targeted layers
    if cfg.parallel.float8:
        if hooks.active or d.layout.tp > 1:
            raise LlmpipeError("parallel.float8 needs parallel.tp=1 and no qat (llmpipe.compress)")
        apply_float8(model)
    parallelize(model, cfg.parallel, d)
    model.to_empty(device=d.device)
    model.init_weights(seed=cfg.train.seed)  # type: ignore[operator]
    if cfg.lora.rank:
        lora.init_adapters(model, cfg.train.seed)
    if zero.stage(cfg.parallel, d.dp_size) == 1:
        zero.replicate_gradients(model, d)  # on the materialised parameters: their hooks are kept
    return model


def build_parallel_model(
    cfg: RunConfig, d: Dist, hooks: TrainCompression | None = None
) -> tuple[torch.nn.Module, Pipeline | None]:
    """The module the optimizer and checkpoints see, and the pipeline that runs it when pp > 1. The
    encoder-decoder has its own parallelisation (train/t5.py); the decoder and the encoder share
    ``build_model`` (train/arch.py picks the class)."""
    if cfg.model.arch == "encoder_decoder":
        return t5.build_model(cfg, d), None
    if d.layout.pp == 1:
        return build_model(cfg, d, hooks), None
    if hooks is not None and hooks.active:
        raise LlmpipeError("qat (llmpipe.compress) needs parallel.pp=1")
    with torch.device("meta"):
        model = Transformer(cfg.model)
    if cfg.parallel.float8:
        apply_float8(model)
    pipe = Pipeline(cfg, d, model)
    return pipe.parts, pipe


def device_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def memory_plan(cfg: RunConfig, d: Dist, seq_len: int) -> Plan:
    """`llmpipe plan`'s estimate for this run: per-device memory by component, and whether it fits."""
    return plan_for_run(
        cfg,
        world_size=d.world_size,
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", d.world_size)),
        seq_len=seq_len,
        device_memory_gb=device_memory_gb(d.device),
        dp_replicate=d.layout.dp_replicate,
        dp_shard=d.layout.dp_shard,
        device="cuda" if d.device.type == "cuda" else "cpu",
    )


def build_text_eval(cfg: RunConfig, eos_id: int, seq_len: int) -> TextEval | None:
    if not cfg.eval.every:
        return None
    if cfg.parallel.pp > 1 or cfg.parallel.cp > 1:
        raise LlmpipeError(
            "eval.every (bits per byte on text sets) does not run under pipeline or context parallelism yet"
        )
    shards = cfg.data.path if cfg.data.path is not None else cfg.data.sources[0].path
    assert shards is not None
    return TextEval(
        cfg.eval, shards / TOKENIZER_FILE, eos_id, cfg.model.max_seq_len or seq_len, cfg.train.steps
    )


def device_name(d: Dist) -> str:
    if d.device.type == "cuda":
        return f"{d.world_size} x {torch.cuda.get_device_name(d.device)} (nccl)"
    return f"CPU, {d.world_size} process(es) (gloo), {torch.get_num_threads()} thread(s) each"


def startup_summary(
    cfg: RunConfig, d: Dist, out: Path, n_params: int, n_dense: int, samples: int, seq_len: int
) -> list[str]:
    """A few lines that say what runs where; the whole resolved config is in ``out/config.yaml``."""
    m = cfg.model
    lines = [
        f"run {out} (the full config: {out / 'config.yaml'})",
        f"device: {device_name(d)}; mesh {d.layout}; {cfg.parallel.mixed_precision}",
        f"model: {n_params:,} parameters ({n_dense:,} without the embedding): {m.n_layers} layers, "
        f"dim {m.dim}, {m.n_heads} heads, vocab {m.vocab_size:,}, sequence {seq_len}",
        f"data: {samples:,} training samples; {cfg.train.steps:,} steps of {cfg.data.batch_size} x "
        f"{d.dp_size} sample(s) x {cfg.train.grad_accum} accumulation",
    ]
    if d.device.type == "cuda":  # the plan's memory by component; its compute budget is not this run's
        lines += render_memory(memory_plan(cfg, d, seq_len))
    else:
        plan = memory_plan(cfg, d, seq_len)
        lines.append(
            f"memory: about {plan.total_gb:.2f} GB per process (llmpipe plan's estimate) of "
            f"{device_memory_gb(d.device):.0f} GB on this machine"
        )
    return lines


def lora_base_reference(hf_dir: Path, d: Dist) -> dict[str, str]:
    """The base's path and sha256, hashed once (rank 0) and shared."""
    box: list[dict[str, str] | None] = [lora.base_reference(hf_dir) if d.is_main else None]
    if dist.is_initialized():
        dist.broadcast_object_list(box, src=0)
    assert box[0] is not None
    return box[0]


def lora_summary(cfg: RunConfig, model: torch.nn.Module, n_params: int, d: Dist) -> dict[str, float]:
    """The adapters' size and the base's memory (QLoRA: the NF4 tensors' bytes, measured), printed and
    returned for the metrics."""
    lo = cfg.lora
    local = sum(_local(p).numel() for p in model.parameters() if p.requires_grad)
    trainable = int(all_reduce_sum([float(local)], d.device)[0]) if d.layout.fsdp > 1 else local
    rec: dict[str, float] = {"lora_trainable_params": trainable}
    line = (
        f"lora: rank {lo.rank}, alpha {lo.alpha:g} on {','.join(lo.targets)}: {trainable:,} trainable "
        f"parameters ({100 * trainable / n_params:.2f}% of the {n_params:,} of the base, which is frozen)"
    )
    if lo.base_quant == "nf4":
        weights = sum(m.in_features * m.out_features for m in lora.lora_modules(model).values())
        held = lora.nf4_bytes(model)
        rec.update(base_nf4_bytes=held, base_nf4_weights=weights, base_nf4_bits_per_weight=8 * held / weights)
        line += (
            f"; the {weights:,} weights of its adapted layers in NF4: {held:,} bytes held per process "
            f"({8 * held / weights:.3f} bits per weight; {2 * weights:,} bytes in bf16)"
        )
    if d.is_main:
        print(line, flush=True)
    return rec


_OLD_CHECKPOINT = re.compile(r"(damaged-)?step-\d+")


def fresh_start_problem(out: Path) -> str | None:
    """``checkpoint.resume=false`` starts a run over: refused where ``out`` already holds checkpoints, since
    the new run's would mix with them (keep-K pruning would then delete the new run's lower steps, and
    config.yaml would describe a model no checkpoint holds)."""
    root = out / "checkpoints"
    found = sorted(p.name for p in root.glob("*step-*") if p.is_dir() and _OLD_CHECKPOINT.fullmatch(p.name))
    if not found:
        return None
    return (
        f"--out {out} already holds checkpoints ({', '.join(found[-3:])}) and checkpoint.resume is false: "
        f"train into a new --out directory, or move or delete {out / 'checkpoints'} to start over"
    )


def write_config(out: Path, text: str) -> None:
    """``out/config.yaml``, replaced atomically (a reader never sees half of it)."""
    tmp = out / f".config.yaml.tmp-{os.getpid()}"  # outdir.TEMP_NAME: a kill leaves nothing foreign
    tmp.write_text(text)
    os.replace(tmp, out / "config.yaml")


def lock_run_dir(out: Path, d: Dist, overwrite: bool = False, resume: bool = True) -> DirLock | None:
    """Rank 0 creates ``out`` and takes its lock; every rank stops with the same one line if it cannot
    (a directory holding files llmpipe did not write is refused unless ``overwrite``; one holding
    checkpoints when ``resume`` is false)."""
    lock: DirLock | None = None
    box: list[str | None] = [None]
    if d.is_main:
        try:
            RUN_DIR.check(out, overwrite)
            if not resume and (problem := fresh_start_problem(out)):
                raise LlmpipeError(problem)
            out.mkdir(parents=True, exist_ok=True)
            lock = DirLock(out, "run directory").acquire()
        except OSError as e:
            box = [f"--out {out}: cannot create the run directory ({e.strerror})"]
        except LlmpipeError as e:
            box = [str(e)]
    if dist.is_initialized():
        dist.broadcast_object_list(box, src=0)
    if box[0]:
        raise LlmpipeError(box[0])
    return lock


def run(cfg: RunConfig, out: Path, overwrite: bool = False) -> None:
    d = init_distributed(cfg.parallel, cfg.model)
    resolve_for_device(cfg, d.device)
    if d.layout.pp > 1 and (cfg.data.batch_size % microbatches(cfg.parallel)):
        raise LlmpipeError(
            f"data.batch_size {cfg.data.batch_size} is not a multiple of the {microbatches(cfg.parallel)} "
            "pipeline micro-batches (parallel.pp_microbatches)"
        )
    lock = lock_run_dir(out, d, overwrite, cfg.checkpoint.resume)
    try:
        _run(cfg, out, d)
    finally:
        if lock is not None:
            lock.release()


def _run(cfg: RunConfig, out: Path, d: Dist) -> None:
    # dropout (model.dropout, lora.dropout) draws from the global generator: the same masks in every run
    # of this config (a resume restores the generator's state from the checkpoint)
    torch.manual_seed(cfg.train.seed + d.dp_rank)
    train_ds = open_train(cfg.data)
    hf_dir = init_from.directory(cfg)  # model.init_from or init.from_hf: one feature
    init_from.prepare(cfg.model, first_directory(cfg.data), hf_dir)  # its shape, its tokenizer checked
    span = None  # an encoder-decoder's span corruption: extra ids after the vocabulary (train/t5.py)
    if cfg.model.arch == "encoder_decoder":
        span = t5.prepare(
            cfg, train_ds.vocab_size, train_ds.seq_len, train_ds.eos_id, train_ds.special_tokens
        )
    cfg.model.vocab_size = cfg.model.vocab_size or train_ds.vocab_size
    cfg.model.max_seq_len = cfg.model.max_seq_len or train_ds.seq_len
    if d.context_parallel is not None:
        d.context_parallel.check_seq_len(train_ds.seq_len)
    if cfg.model.vocab_size < train_ds.vocab_size or cfg.model.max_seq_len < train_ds.seq_len:
        raise LlmpipeError(
            f"model vocab {cfg.model.vocab_size} / max_seq_len {cfg.model.max_seq_len} is smaller than the "
            f"shards' vocab {train_ds.vocab_size} / seq_len {train_ds.seq_len}"
        )
    masker = mlm.prepare(
        cfg,
        first_directory(cfg.data) / TOKENIZER_FILE,
        train_ds.vocab_size,
        train_ds.eos_id,
        train_ds.special_tokens,
    )
    schedule = BatchSchedule(
        cfg.data.batch_size * d.dp_size,
        train_ds.seq_len,
        cfg.train.grad_accum,
        cfg.train.ramp_start,
        cfg.train.ramp_tokens,
    )
    data = build_data(cfg, d, schedule, train_ds)
    if d.is_main:
        pipelined = d.layout.pp > 1
        notes = val_notices(data, d.dp_size, cfg.data.batch_size, pipelined)
        for line in [*verify_notices(data), *notes]:
            print(f"note: {line}", flush=True)
    if hf_dir is not None and d.layout.pp > 1:
        raise LlmpipeError("model.init_from loads a whole model: use it with parallel.pp=1")
    hooks = compression_hooks(cfg)
    model, pipeline = build_parallel_model(cfg, d, hooks)
    base_ref: dict[str, str] | None = None
    if hf_dir is not None and cfg.lora.rank:
        lora.load_base(model, hf_dir)  # the frozen base (quantized to NF4 with lora.base_quant=nf4)
        base_ref = lora_base_reference(hf_dir, d)
        if d.is_main:
            print(f"base weights from {hf_dir} (frozen; adapters and a fresh optimizer)", flush=True)
    elif hf_dir is not None:
        init_from.load(model, hf_dir, hooks)  # the weights, and the pruning masks it holds
        if d.is_main:
            print(f"model weights from {hf_dir} (a fresh optimizer)", flush=True)
    with torch.device("meta"):
        whole = new_model(cfg.model)
    n_params = count_params(whole)
    n_dense = count_params(whole, exclude_embeddings=True)
    config_text = dump(cfg)  # written once a resume has found the checkpoint fits (below)
    if d.is_main:
        print(
            "\n".join(startup_summary(cfg, d, out, n_params, n_dense, len(train_ds), train_ds.seq_len)),
            flush=True,
        )
        if span:
            print(t5.summary(span), flush=True)
    lora_record = lora_summary(cfg, model, n_params, d) if cfg.lora.rank else {}
    if cfg.parallel.cpu_offload:
        on_cpu = sum(_local(p).device.type == "cpu" for p in model.parameters())
        if d.is_main:
            print(f"cpu offload: {on_cpu} of {len(list(model.parameters()))} parameter shards in host memory")
    optimizer = build_optimizer(model, cfg.optim, zero.optimizer_mesh(cfg.parallel, d))
    scheduler = build_scheduler(optimizer, cfg.optim, cfg.train.steps, schedule)
    ckpt = Checkpointer(
        out, cfg.checkpoint, rank=d.rank, world_size=d.world_size, frozen_base=bool(cfg.lora.rank)
    )
    # a mixture of experts: MFU counts the parameters each token uses
    fpt = flops_per_token(cfg.model, n_params - inactive_params(whole), train_ds.seq_len)
    if span:  # per target token: the metrics count the decoder's
        fpt = t5.flops_per_target(cfg.model, span.lengths)
    metrics = MetricsWriter(out, enabled=d.is_main, tensorboard=cfg.metrics.tensorboard)
    trainer = Trainer(
        cfg,
        d,
        model,
        optimizer,
        scheduler,
        SpanCorruptionLoader(data.loader, span) if span else data.loader,
        data.val.get(""),
        ckpt,
        metrics,
        Throughput(fpt, d.world_size, peak_tflops(d.device, cfg.metrics.peak_tflops)),
        val_sources=data.val if "" not in data.val else None,
        schedule=schedule,
        text_eval=build_text_eval(cfg, train_ds.eos_id, train_ds.seq_len),
        pipeline=pipeline,
        compression=hooks,
        lora_base=base_ref,
        masker=masker,
        span=span,
    )
    latest = ckpt.latest() if cfg.checkpoint.resume else None
    if latest is None:
        trainer.record(lora_record)
    else:
        if base_ref is not None:  # adapters resume only on the base they were trained on
            lora.check_base(load_train_state(latest / STATE_FILE), base_ref, latest)
        trainer.restore(latest)
        if d.is_main:
            print(f"resumed from {latest} at step {trainer.step}", flush=True)
    if d.is_main:  # only now: a resume refused above leaves the run's config.yaml as its checkpoints need
        write_config(out, config_text)
    try:
        trainer.fit()
    finally:
        metrics.close()


def main(argv: list[str] | None = None) -> int:
    try:
        args, cfg = parse_args(argv)
        run(cfg, args.out, args.overwrite)
    except LlmpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
