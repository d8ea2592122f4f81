"""Training throughput on one device: tokens/s, MFU and peak memory of the trainer's step for the gpt2-124m
and llama-1b configs at their sequence lengths, with and without document masking, torch.compile, float8
and the fused (chunked) output layer + loss. Prints one table with the device name; the ratio column is
each variant's tokens/s over the first row's (the same config, plain causal SDPA, no compile, no float8)
measured in the same run. A ``+fusedce`` variant is measured at the same batch as its peer: its memory
saving shows in the peak memory column (and would allow a larger ``--batch-size``).

    python bench/bench_gpu.py                              # both configs, every variant the device runs
    python bench/bench_gpu.py --config configs/train/llama-1b.yaml --steps 30
    python bench/bench_gpu.py --quick                      # the tiny config on CPU: checks the script
    python bench/bench_gpu.py --config configs/train/llama-1b.yaml --variants causal+compile-ac,causal+compile+fusedce-ac

The step is the trainer's own: ``forward_backward`` over ``--grad-accum`` micro-batches (bf16 autocast on
one device, as a single-rank run), gradient clipping and AdamW (fused on CUDA), the blocks compiled in
place and activation checkpointing as the config says. Tokens are random ids of the config's vocabulary (the step's speed does not depend on
their values); document masking packs documents of ``--doc-len`` tokens on average (exponential lengths,
seeded), numbered as the loader numbers them. Variants the device cannot run (float8 below compute
capability 8.9, FlexAttention training off CUDA) are listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import re
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]

import torch  # noqa: E402
from llmpipe.data import Batch  # noqa: E402
from llmpipe.errors import ConfigError  # noqa: E402
from llmpipe.train.config import RunConfig, load_config, resolve_for_device  # noqa: E402
from llmpipe.train.metrics import flops_per_token, peak_memory_mib, peak_tflops  # noqa: E402
from llmpipe.train.model import Transformer, count_params  # noqa: E402
from llmpipe.train.optim import build_optimizer, clip_grad_norm  # noqa: E402
from llmpipe.train.parallel import apply_float8  # noqa: E402
from llmpipe.train.trainer import forward_backward  # noqa: E402

# the shards the configs are written for (their comments): vocabulary and sequence length
SHAPES = {"gpt2-124m": (50257, 1024), "llama-1b": (128256, 2048), "tiny": (257, 64)}


@dataclass(frozen=True)
class Variant:
    doc_mask: bool
    attention: Literal["sdpa", "flex"]  # how the document mask is applied
    compile: bool
    float8: bool
    checkpointing: bool | None = None  # activation checkpointing; None: as the config says
    fused_ce: bool = False  # model.fused_loss: the output layer and the loss by chunks (train/loss.py)

    @property
    def name(self) -> str:
        mask = f"doc mask ({self.attention})" if self.doc_mask else "causal"
        ac = {None: "", True: " + AC", False: " - AC"}[self.checkpointing]
        flags = (" + compile", self.compile), (" + float8", self.float8), (" + fused CE", self.fused_ce)
        return mask + "".join(text for text, on in flags if on) + ac

    @classmethod
    def parse(cls, key: str) -> Variant:
        """``causal|sdpa|flex`` then any of ``+compile``, ``+float8``, ``+fusedce``, ``+ac``, ``-ac``:
        ``flex+compile-ac``, ``causal+compile+fusedce-ac``."""
        parts = re.findall(r"[+-]?[a-z0-9]+", key)
        mask, flags = parts[0], set(parts[1:])
        known = {"+compile", "+float8", "+fusedce", "+ac", "-ac"}
        if mask not in ("causal", "sdpa", "flex") or not flags <= known:
            raise SystemExit(
                f"bench_gpu: unknown variant {key!r} (causal|sdpa|flex, +compile, +float8, +fusedce, +ac, -ac)"
            )
        ac = True if "+ac" in flags else False if "-ac" in flags else None
        return cls(
            mask != "causal",
            "flex" if mask == "flex" else "sdpa",
            "+compile" in flags,
            "+float8" in flags,
            ac,
            "+fusedce" in flags,
        )


DEFAULT_VARIANTS = (
    "causal,sdpa,causal+compile,sdpa+compile,flex+compile,causal+compile+float8,flex+compile+float8"
)
QUICK_VARIANTS = "causal,sdpa,flex,causal+compile,sdpa+compile,flex+compile"


def doc_ids(b: int, n: int, mean_len: int, gen: torch.Generator) -> torch.Tensor:
    """Document index per position: exponential document lengths, counted from 0 in each row."""
    ends = torch.rand(b, n, generator=gen) < 1.0 / max(mean_len, 1)
    return torch.cumsum(ends.int(), dim=1, dtype=torch.int32)


def run_config(
    cfg: RunConfig, variant: Variant, device: torch.device, args: argparse.Namespace
) -> dict[str, Any]:
    cfg = dataclasses.replace(
        cfg,
        model=dataclasses.replace(
            cfg.model, doc_mask=variant.doc_mask, attention=variant.attention, fused_loss=variant.fused_ce
        ),
        parallel=dataclasses.replace(
            cfg.parallel,
            compile=variant.compile,
            float8=variant.float8,
            activation_checkpointing=(
                cfg.parallel.activation_checkpointing
                if variant.checkpointing is None
                else variant.checkpointing
            ),
        ),
        optim=dataclasses.replace(cfg.optim, fused="auto"),
    )
    resolve_for_device(cfg, device)  # ConfigError: the device cannot run this variant
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    with torch.device(device):
        model = Transformer(cfg.model)
    model.init_weights(seed=0)
    if cfg.parallel.float8:
        apply_float8(model)
    model.activation_checkpointing = cfg.parallel.activation_checkpointing
    model.checkpoint_every = cfg.parallel.checkpoint_every
    if cfg.parallel.compile is True:
        for block in model.layers:
            block.compile()
    opt = build_optimizer(model, cfg.optim)
    b, n = cfg.data.batch_size, cfg.model.max_seq_len or 0
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(0, cfg.model.vocab_size or 0, (b, n + 1), generator=gen, dtype=torch.int32)
    ids = doc_ids(b, n, args.doc_len, gen) if variant.doc_mask else None
    batch = Batch(rows[:, :-1].to(device), rows[:, 1:].to(device), None if ids is None else ids.to(device))
    bf16 = cfg.parallel.mixed_precision == "bf16"
    amp = functools.partial(torch.autocast, device.type, dtype=torch.bfloat16, enabled=bf16)

    accum = args.grad_accum or cfg.train.grad_accum

    def step() -> None:  # one optimizer step over ``accum`` micro-batches (the same one: speed is the same)
        tokens, fused = float(b * n * accum), cfg.model.fused_loss
        forward_backward(model, [batch] * accum, tokens, 1, amp=amp, fused_loss=fused)  # type: ignore[arg-type]
        clip_grad_norm(model, cfg.optim.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    dt = time.perf_counter() - t0
    tps = b * n * accum * args.steps / dt
    if args.profile and variant == Variant.parse(args.profile_variant):
        profile(
            step, sync, args.profile / re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{cfg_name(cfg)}-{variant.name}")
        )
    peak = peak_tflops(device, args.peak_tflops)
    fpt = flops_per_token(cfg.model, count_params(model), n)
    return {
        "tokens_s": tps,
        "mfu": None if peak is None else tps * fpt / (peak * 1e12),
        "mem_mib": peak_memory_mib(device),
    }


def cfg_name(cfg: RunConfig) -> str:
    return f"d{cfg.model.dim}-l{cfg.model.n_layers}"


def profile(step: Any, sync: Any, stem: Path) -> None:
    """Three steps under the torch profiler: a table of the kernels by device time and a Chrome trace."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    stem.parent.mkdir(parents=True, exist_ok=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch_profile(activities=acts) as prof:
        for _ in range(3):
            step()
        sync()
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    stem.with_suffix(".txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=40))
    trace = stem.with_suffix(".json")
    prof.export_chrome_trace(str(trace))
    with trace.open("rb") as src, gzip.open(f"{trace}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    print(f"profile: {stem}.txt, {trace}.gz", flush=True)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({torch.get_num_threads()} threads)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, action="append", help="configs/train/*.yaml (repeatable)")
    p.add_argument("--quick", action="store_true", help="the tiny config, 2 steps: checks the script on CPU")
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    p.add_argument("--batch-size", type=int, default=0, help="sequences per step (0: the config's)")
    p.add_argument(
        "--grad-accum", type=int, default=1,
        help="micro-batches per optimizer step (0: the config's train.grad_accum); AdamW runs once per step",
    )  # fmt: skip
    p.add_argument("--doc-len", type=int, default=512, help="mean document length with document masking")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="device peak for MFU (0: by device name)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument(
        "--variants",
        default="",
        help=f"comma-separated, e.g. causal,causal+fusedce (default: {DEFAULT_VARIANTS})",
    )
    p.add_argument("--profile", type=Path, help="write a torch profiler table and trace of one variant here")
    p.add_argument("--profile-variant", default="causal+compile", help="the variant --profile records")
    args = p.parse_args(argv)
    if args.quick:
        args.config = args.config or [ROOT / "configs/train/tiny.yaml"]
        args.steps, args.warmup, args.doc_len = 2, 1, 16
    configs = args.config or [ROOT / "configs/train/gpt2-124m.yaml", ROOT / "configs/train/llama-1b.yaml"]
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    print(
        f"device: {device_name(device)} | torch {torch.__version__} | {args.steps} timed steps per variant, "
        f"{args.grad_accum or 'train.grad_accum'} micro-batch(es) per step"
    )
    header = f"| {'config':<10} | {'seq':>5} | {'variant':<32} | {'tokens/s':>10} | {'ratio':>5} | {'MFU':>6} | {'peak MiB':>9} |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for path in configs:
        cfg = load_config(path, [])
        name = path.stem
        vocab, seq = SHAPES.get(name, (257, 64))
        cfg.model.vocab_size, cfg.model.max_seq_len = (
            cfg.model.vocab_size or vocab,
            cfg.model.max_seq_len or seq,
        )
        if args.batch_size:
            cfg.data.batch_size = args.batch_size
        base = None
        keys = args.variants or (QUICK_VARIANTS if args.quick else DEFAULT_VARIANTS)
        for v in [Variant.parse(k) for k in keys.split(",")]:
            try:
                r = run_config(cfg, v, device, args)
            except ConfigError as e:
                print(f"| {name:<10} | {seq:>5} | {v.name:<32} | skipped: {e}")
                continue
            except torch.OutOfMemoryError:
                print(
                    f"| {name:<10} | {seq:>5} | {v.name:<32} | out of memory at batch {cfg.data.batch_size}"
                )
                continue
            except Exception as e:  # one variant's failure (a kernel, a library) must not hide the others
                traceback.print_exc()
                first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
                print(f"| {name:<10} | {seq:>5} | {v.name:<32} | failed: {type(e).__name__}: {first}")
                continue
            base = base or r["tokens_s"]
            mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
            print(
                f"| {name:<10} | {cfg.model.max_seq_len:>5} | {v.name:<32} | {r['tokens_s']:>10,.0f} | "
                f"{r['tokens_s'] / base:>5.2f} | {mfu:>6} | {r['mem_mib']:>9,.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
