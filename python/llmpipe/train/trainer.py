"""The training loop: gradient accumulation, the spike guard, logging, validation and checkpoints."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.tensor import DTensor

from llmpipe.compress.training import TrainCompression
from llmpipe.data import Batch, ShardDataset, TokenLoader
from llmpipe.data.loader import MixtureLoader
from llmpipe.errors import LlmpipeError
from llmpipe.train.checkpoint import Checkpointer, CheckpointMismatchError
from llmpipe.train.config import RunConfig
from llmpipe.train.guard import SpikeGuard, TrainingDiverged
from llmpipe.train.loss import output_cross_entropy
from llmpipe.train.metrics import MetricsWriter, Throughput, peak_memory_mib
from llmpipe.train.mlm import Masker
from llmpipe.train.moe import RoutingMonitor
from llmpipe.train.moe import aux_loss as moe_aux_loss
from llmpipe.train.optim import clip_grad_norm
from llmpipe.train.parallel import Dist, all_reduce_, all_reduce_sum, autocast, loss_context
from llmpipe.train.pipeline import Pipeline
from llmpipe.train.scaler import LossScaler
from llmpipe.train.schedule import BatchSchedule
from llmpipe.train.span_corruption import Seq2SeqBatch, SpanCorruptionLoader, SpanCorruptor
from llmpipe.train.text_eval import TextEval

SPIKE_SCALE = 1000.0  # debug.inject_spike_at_step multiplies the loss by this


@dataclass
class StepResult:
    loss: float  # mean over every target token of the step, all ranks
    tokens: int  # target tokens of the step, all ranks
    decision: str
    grad_norm: torch.Tensor | None


def model_args(b: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The model's inputs: tokens and document ids, or (span corruption) encoder and decoder ids."""
    if isinstance(b, Seq2SeqBatch):
        return b.input, b.decoder_input
    return b.input, b.doc_ids


def count_targets(b: Batch) -> int:
    return int((b.target != -100).sum())


def forward_backward(
    model: nn.Module,
    batches: list[Batch],
    global_tokens: float | torch.Tensor,
    world_size: int,
    scale: float = 1.0,
    amp: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    grad_scale: float = 1.0,
    loss_ctx: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    fused_loss: bool = False,
) -> torch.Tensor:
    """Accumulate gradients of the mean loss over all ``global_tokens`` target tokens of the step
    (every rank, every micro-batch). FSDP averages gradients over the data-parallel ranks, context-
    parallel ones included (``world_size`` here), so each rank's summed loss is scaled by world_size / global_tokens.
    ``grad_scale`` multiplies the backward loss only (fp16 loss scaling). ``fused_loss``
    (model.fused_loss): the decoder returns its final hidden states and the loss applies the output
    layer a chunk of tokens at a time (train/loss.py). Returns this rank's summed loss (fp64, on the
    device) without a host sync, so a GPU never waits here."""
    if isinstance(global_tokens, torch.Tensor):
        norm = world_size / global_tokens.clamp(min=1).float()
    else:
        norm = torch.tensor(world_size / max(global_tokens, 1.0))
    loss_sum = torch.zeros((), dtype=torch.float64, device=batches[0].input.device)
    for b in batches:
        with amp():  # forward only; backward runs outside autocast
            if fused_loss:  # the output layer's matmuls in autocast's dtype: inside amp
                loss = output_cross_entropy(model, model(*model_args(b), return_hidden=True), b.target)
            else:
                logits = model(*model_args(b))
        with loss_ctx():  # loss parallel: the loss and its backward on vocabulary-sharded logits
            if not fused_loss:
                loss = F.cross_entropy(
                    logits.flatten(0, 1), b.target.long().flatten(), ignore_index=-100, reduction="sum"
                )
            loss = loss * scale
            backward = loss
            aux = moe_aux_loss(model)  # MoE load balancing: per sequence, to the mean per sequence
            if aux is not None:
                global_seqs = world_size * len(batches) * b.input.shape[0]
                backward = loss + aux * (norm.reciprocal().to(aux.device) * world_size / global_seqs)
            (backward * (norm.to(loss.device) * grad_scale)).backward()
        if isinstance(loss, DTensor):
            loss = loss.full_tensor()
        loss_sum += loss.detach().double()
    return loss_sum


class Trainer:
    def __init__(
        self,
        cfg: RunConfig,
        d: Dist,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        loader: TokenLoader | SpanCorruptionLoader,
        val_ds: ShardDataset | None,
        checkpointer: Checkpointer,
        metrics: MetricsWriter,
        throughput: Throughput,
        *,
        val_sources: dict[str, ShardDataset] | None = None,  # a mixture: validation loss per source
        schedule: BatchSchedule | None = None,  # micro-batches per step (a batch-size ramp)
        text_eval: TextEval | None = None,  # bits per byte on the eval section's text sets
        pipeline: Pipeline | None = None,  # pp > 1: runs the stages; ``model`` holds their parameters
        compression: TrainCompression | None = None,  # QAT, pruning masks (llmpipe.compress)
        lora_base: dict[str, str] | None = None,  # LoRA: the frozen base's path and sha256 (train/lora.py)
        masker: Masker | None = None,  # the encoder: masked-LM batches from the loader's (train/mlm.py)
        span: SpanCorruptor | None = None,  # encoder-decoder: validation batches span-corrupted too
    ) -> None:
        self.masker = masker
        self.span = span
        self.lora_base = lora_base
        self.text_eval = text_eval
        self.cfg, self.d, self.model = cfg, d, model
        self.optimizer, self.scheduler, self.loader = optimizer, scheduler, loader
        self.val_ds, self.ckpt, self.metrics, self.throughput = val_ds, checkpointer, metrics, throughput
        self.val_sources = val_sources or {}
        g = cfg.data.batch_size * d.dp_size
        self.schedule = schedule or BatchSchedule(g, 1, cfg.train.grad_accum, 1, 0)
        self.data_ended = False
        self.guard = SpikeGuard(cfg.guard)
        self.routing = RoutingMonitor(model, d.device) if cfg.model.moe.experts else None
        self.compression = compression  # QAT fake quantization, pruning masks (llmpipe.compress)
        self.pipeline = pipeline
        p = cfg.parallel
        self.scaler = LossScaler(p.mixed_precision == "fp16", p.fp16_init_scale, p.fp16_growth_interval)
        self.overflows_injected: set[int] = set()
        self.rollbacks = 0  # since the last checkpoint saved (guard.max_rollbacks)
        self.step = 0  # optimizer steps done
        self.injected: dict[int, int] = {}
        self.history: list[tuple[int, float]] = []

    # -- state ----------------------------------------------------------------------------------
    def train_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "scheduler": self.scheduler.state_dict(),
            "loader": self.loader.state_dict(),
            "guard": self.guard.state_dict(),
            "compression": self.compression.state_dict() if self.compression else None,
            "scaler": self.scaler.state_dict(),
            **({"lora_base": self.lora_base} if self.lora_base else {}),
        }

    def restore(self, path: Path, *, rollback: bool = False) -> None:
        try:
            saved = self.ckpt.load(path, self.model, self.optimizer, restore_rng=not rollback)
        except CheckpointMismatchError as e:
            raise LlmpipeError(
                f"{path} does not fit this run's model ({e.cause}); "
                f"train into a new --out directory, or move or delete {path.parent} to start over"
            ) from None
        except (ValueError, RuntimeError, CheckpointException) as e:
            raise LlmpipeError(
                f"{path} does not fit this run's model ({str(e).splitlines()[0][:300]}); "
                f"train into a new --out directory, or move or delete {path.parent} to start over"
            ) from e
        self.step = saved["step"]
        self.scheduler.load_state_dict(saved["scheduler"])
        self.guard.load_state_dict(saved["guard"])
        if self.compression is not None:
            self.compression.load_state_dict(self.model, saved.get("compression"))
        if "scaler" in saved and self.scaler.enabled:
            self.scaler.load_state_dict(saved["scaler"])
        if not rollback:  # a rollback keeps the loader where it is: the data after the spike is skipped
            try:
                self.loader.load_state_dict(saved["loader"])
            except ValueError as e:
                raise LlmpipeError(
                    f"{path} was written for other shards or another data order ({e}); "
                    f"train into a new --out directory, or move or delete {path.parent} to start over"
                ) from e

    def save(self, *, blocking: bool) -> None:
        self.rollbacks = 0  # a new checkpoint: the run got past whatever it rolled back from
        self.ckpt.save(self.step, self.model, self.optimizer, self.train_state(), blocking=blocking)

    # -- one optimizer step ---------------------------------------------------------------------------
    def _loss_scale(self) -> float:
        hits = self.injected.get(self.step, 0)
        if self.step in self.cfg.debug.inject_spike_at_step and hits < self.cfg.debug.inject_spike_repeat:
            self.injected[self.step] = hits + 1
            return SPIKE_SCALE
        return 1.0

    def train_step(self, batches: list[Batch]) -> StepResult:
        # token count and loss are reduced as device tensors: one host sync per step, for the guard.
        # Every tp and pp rank of a replica holds the same batch: the world sum counts it tp x pp times,
        # and its loss tp times (only the last pipeline stage has one).
        lay = self.d.layout
        batches = self._cp_shard(batches)  # cp > 1: this rank's chunks of each row; their targets count
        tokens = all_reduce_(torch.stack([(b.target != -100).sum() for b in batches]).sum().double())
        tokens = tokens / (lay.tp * lay.pp)
        amp = functools.partial(autocast, self.cfg.parallel, self.d)
        if self.compression is not None:
            self.compression.before_step(self.model, self.step)
        gs = self.scaler.scale
        if self.pipeline is not None:
            norm_t = lay.dp / tokens.clamp(min=1).float()
            loss_sum = self.pipeline.train_batches(batches, norm_t, self._loss_scale(), gs)
        else:
            ctx = functools.partial(loss_context, self.cfg.parallel)
            fused = self.cfg.model.fused_loss
            loss_sum = forward_backward(
                self.model, batches, tokens, lay.fsdp, self._loss_scale(), amp, gs, ctx, fused_loss=fused
            )
        self._inject_overflow()
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not self.scaler.unscale_(params, self.d.device):  # fp16 overflow on some rank: skip the step
            if self.routing is not None:
                self.routing.after_step(apply=False)
            total, global_tokens = torch.stack([all_reduce_(loss_sum) / lay.tp, tokens]).tolist()
            self.optimizer.zero_grad(set_to_none=True)
            return StepResult(total / max(global_tokens, 1.0), int(global_tokens), "overflow", None)
        if self.cfg.debug.dump_grads and self.step == 0:
            self._dump_grads()
        # the global gradient norm joins the one host sync: a finite loss with a NaN/inf gradient
        # (a diverged run) must not reach the weights
        grad_norm = clip_grad_norm(self.model, self.cfg.optim.grad_clip, self._pp_group())
        reduced = [all_reduce_(loss_sum) / lay.tp, tokens, grad_norm.to(loss_sum.device, torch.float64)]
        total, global_tokens, norm = torch.stack(reduced).tolist()
        mean = total / max(global_tokens, 1.0)
        decision = self.guard.check(mean, norm)
        if self.routing is not None:  # MoE bias balancing from this step's loads (not a skipped step's)
            self.routing.after_step(apply=decision == "ok")
        if decision == "ok":
            self.optimizer.step()
            if self.compression is not None:
                self.compression.apply_masks(self.model)  # pruned weights stay zero
            self.scheduler.step()
            self.step += 1
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(mean, int(global_tokens), decision, grad_norm)

    def _cp_shard(self, batches: list[Batch]) -> list[Batch]:
        cp = self.d.context_parallel
        return batches if cp is None else [cp.shard(b) for b in batches]

    def _pp_group(self) -> dist.ProcessGroup | None:
        return self.d.mesh["pp"].get_group() if self.d.layout.pp > 1 else None

    def _inject_overflow(self) -> None:
        """debug.inject_overflow_at_step: an inf in one gradient on rank 0, as an fp16 overflow would."""
        if self.step not in self.cfg.debug.inject_overflow_at_step or self.step in self.overflows_injected:
            return
        self.overflows_injected.add(self.step)
        if self.d.rank == 0:
            p = next(p for p in self.model.parameters() if p.grad is not None)
            g = p.grad
            assert g is not None
            (g.to_local() if isinstance(g, DTensor) else g).view(-1)[0] = float("inf")

    def _dump_grads(self) -> None:
        """debug.dump_grads: this rank's gradients as full tensors, by parameter name (the test oracle)."""
        out = self.ckpt.root.parent / "grads"
        grads = {}
        for name, p in self.model.named_parameters():
            g = p.grad
            if g is None:  # frozen (a LoRA run's base)
                continue
            grads[name] = (g.full_tensor() if isinstance(g, DTensor) else g).detach().cpu()
        if self.d.rank == 0 or self.d.layout.pp > 1:
            out.mkdir(parents=True, exist_ok=True)
            torch.save(grads, out / f"rank-{self.d.rank}.pt")

    # -- validation ---------------------------------------------------------------------------------
    @torch.no_grad()
    def _val_sums(self, ds: ShardDataset | None) -> tuple[float, float] | None:
        """Summed loss and target tokens over the first val_batches of ``ds``, all replicas."""
        lay = self.d.layout
        batch = min(self.cfg.data.batch_size, len(ds) // lay.dp) if ds is not None else 0
        if self.pipeline is not None and batch != self.cfg.data.batch_size:
            batch = 0  # the pipeline's stages are built for whole micro-batches of the training batch
        if ds is None or batch == 0:
            return None
        loader = TokenLoader(
            ds,
            batch,
            rank=self.d.dp_rank,
            world_size=lay.dp,
            seed=0,
            device=self.d.device,
            prefetch=1,
            infinite=False,
        )
        self.model.eval()
        loss, tokens = 0.0, 0
        batches = SpanCorruptionLoader(loader, self.span) if self.span is not None else loader
        for i, b in enumerate(batches):
            if i >= self.cfg.train.val_batches:
                break
            if self.masker is not None:
                b = self.masker.validation(b, i, self.d.dp_rank * batch)
            (b,) = self._cp_shard([b])
            tokens += count_targets(b)
            if self.pipeline is not None:
                loss += self.pipeline.eval_batch(b)
                continue
            with autocast(self.cfg.parallel, self.d):
                logits = self.model(*model_args(b))
            with loss_context(self.cfg.parallel):
                ce = F.cross_entropy(logits.flatten(0, 1), b.target.long().flatten(), reduction="sum")
            loss += float(ce.full_tensor() if isinstance(ce, DTensor) else ce)
        self.model.train()
        total, count = all_reduce_sum([loss, tokens], self.d.device)
        # every tp and pp rank of a replica saw the same batch; the loss is on tp ranks of the last stage
        return total / lay.tp, count / (lay.tp * lay.pp)

    def validate(self) -> float | None:
        sums = self._val_sums(self.val_ds)
        return None if sums is None else sums[0] / max(sums[1], 1.0)

    def validation_record(self) -> dict[str, Any]:
        """``val_loss``; for a mixture also ``val_loss/NAME`` per source (``val_loss`` pools them)."""
        if not self.val_sources:
            return {"val_loss": self.validate()}
        rec: dict[str, Any] = {}
        total, count = 0.0, 0.0
        for name, ds in self.val_sources.items():
            sums = self._val_sums(ds)
            if sums is None:
                continue
            rec[f"val_loss/{name}"] = sums[0] / max(sums[1], 1.0)
            total, count = total + sums[0], count + sums[1]
        return {"val_loss": total / count if count else None, **rec}

    # -- the loop -------------------------------------------------------------------------------------
    def _batches(self) -> Iterator[list[Batch]]:
        it = iter(self.loader)
        b, g = self.cfg.data.batch_size, self.cfg.data.batch_size * self.d.dp_size
        while True:
            try:
                group = [next(it) for _ in range(self.schedule.accum(self.step))]
            except StopIteration:  # a mixture whose sources ran out (data.on_exhausted=stop)
                return
            if self.masker is not None:  # keyed by the step and each row's place in the global batch
                group = [self.masker(x, self.step, k * g + self.d.dp_rank * b) for k, x in enumerate(group)]
            yield group

    def _data_record(self) -> dict[str, Any]:
        """Per-source tokens and samples seen (a mixture) and the global batch (a ramp)."""
        rec: dict[str, Any] = {}
        if isinstance(self.loader, MixtureLoader):
            rec.update(self.loader.source_stats())
        if self.schedule.ramped:
            rec["global_batch"] = self.schedule.accum(max(self.step - 1, 0)) * self.schedule.micro_global
        return rec

    def _log_events(self) -> None:
        if isinstance(self.loader, MixtureLoader):
            for e in self.loader.new_events():
                self.record({"data_event": e.message, "event_position": e.position})

    def fit(self) -> None:
        cfg, log = self.cfg, self.d.is_main
        steps = cfg.train.steps
        self.model.train()
        if self.step == 0:
            self.record(self.validation_record())
            self._text_eval()
        batches = self._batches()
        t0 = time.perf_counter()
        while self.step < steps:
            step_before = self.step
            group = next(batches, None)
            if group is None:
                self.data_ended = True
                self._log_events()
                if log:
                    print(f"the data ended after step {self.step}: stopping the run here", flush=True)
                break
            res = self.train_step(group)
            self.throughput.add(self._model_tokens(group, res))
            self.ckpt.poll()
            if res.decision == "overflow":  # fp16: the step was skipped and the scale halved
                self.record({"skipped_steps": self.scaler.skipped, "loss_scale": self.scaler.scale})
                continue
            if res.decision != "ok":
                self._on_spike(res)
                continue
            self.history.append((self.step, res.loss))
            if self.step % cfg.train.log_every == 0 or self.step == steps or step_before == 0:
                rec = {"loss": res.loss, "lr": self.scheduler.get_last_lr()[0], "grad_norm": None}
                if res.grad_norm is not None:
                    rec["grad_norm"] = float(res.grad_norm)
                rec.update(self.throughput.tick())
                rec["peak_mem_mib"] = peak_memory_mib(self.d.device)
                rec["spikes"] = self.guard.total_spikes
                if self.scaler.enabled:
                    rec["loss_scale"], rec["skipped_steps"] = self.scaler.scale, self.scaler.skipped
                rec.update(self._data_record())
                if self.routing is not None:
                    rec.update(self.routing.record())  # tokens per expert, imbalance, dropped tokens
                self.record(rec)
            self._log_events()
            if cfg.train.val_every and self.step % cfg.train.val_every == 0 and self.step != steps:
                self.record(self.validation_record())
            self._text_eval()
            if cfg.checkpoint.every and self.step % cfg.checkpoint.every == 0 and self.step != steps:
                self.save(blocking=False)
            if cfg.debug.stop_after_step and self.step >= cfg.debug.stop_after_step:
                if log:
                    print(
                        f"debug.stop_after_step={cfg.debug.stop_after_step}: stopping as if killed",
                        flush=True,
                    )
                self.ckpt.close()
                return
        self.record(self.validation_record())
        self.save(blocking=True)
        self.ckpt.close()
        if log:
            print(f"done: {self.step} steps in {time.perf_counter() - t0:.1f}s", flush=True)

    def _model_tokens(self, group: list[Batch], res: StepResult) -> int:
        """The tokens of the step that tokens/s and MFU count: the encoder reads every input token
        (its loss counts only the masked ones), the others the target tokens the loss counts."""
        if self.masker is None:
            return res.tokens
        return sum(b.input.numel() for b in group) * self.d.dp_size

    def _text_eval(self) -> None:
        if self.text_eval is not None and self.text_eval.due(self.step):
            amp = functools.partial(autocast, self.cfg.parallel, self.d)
            d = self.d  # windows split over data-parallel ranks; tensor-parallel peers score the same ones
            copies = d.world_size // d.dp_size
            self.record(self.text_eval.evaluate(self.model, d.device, d.dp_rank, d.dp_size, amp, copies))

    def _on_spike(self, res: StepResult) -> None:
        norm = float(res.grad_norm) if res.grad_norm is not None else None
        self.record(
            {
                "spike_loss": res.loss,
                "spike_grad_norm": norm,
                "spike_decision": res.decision,
                "spikes": self.guard.total_spikes,
            }
        )
        if res.decision != "rollback":
            return
        self.ckpt.wait()
        path = self.ckpt.latest()
        self.rollbacks += 1
        if self.rollbacks > self.cfg.guard.max_rollbacks:
            where = f"to {path.name}" if path is not None else "without a checkpoint to roll back to"
            raise TrainingDiverged(
                f"training diverged at step {self.step + 1}: {self.rollbacks - 1} rollback(s) {where} did "
                f"not get past it (last loss {res.loss:.4g}, gradient norm {norm:.4g}); lower optim.lr, "
                "raise optim.warmup_steps or optim.grad_clip, or guard.max_rollbacks to keep trying"
            )
        if path is None:
            if self.d.is_main:
                print(
                    "spike guard: repeated spikes but no checkpoint to roll back to; skipping on", flush=True
                )
            self.guard.consecutive = 0
            return
        self.restore(path, rollback=True)
        self.guard.consecutive = 0
        self.record({"rollback_to": self.step})

    def record(self, rec: dict[str, Any]) -> None:
        rec = {k: v for k, v in rec.items() if v is not None}
        if not rec or not self.d.is_main:
            return
        self.metrics.write(self.step, rec)
        parts = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rec.items()]
        print(f"step {self.step:>6} | " + " | ".join(parts), flush=True)
