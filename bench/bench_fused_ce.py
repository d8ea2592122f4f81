"""The output layer and the loss alone, one forward and backward: full logits (``F.linear`` then ``.float()``
then ``F.cross_entropy``, the trainer's path without ``model.fused_loss``) against train/loss.py's chunked
``linear_cross_entropy`` (the path with it), at llama-1b's head shape (dim 2048, 128,256 ids, fp32 weight
and hidden states) and a reduced token count, under bf16 autocast as a one-device run trains. Prints each
one's peak memory and time and the fused / unfused ratios, and the two losses' relative difference.

Each variant runs in a process of its own (``--child``), warmed up by a call on 64 tokens: its peak
memory is the process's peak RSS (Linux's VmHWM, reset after the warm-up) above what it held before the
measured calls (the inputs and the weight), so it counts the gradients and every temporary of forward
and backward; its time is the best of ``--repeat`` calls. CPU only: this measures what the fused loss
holds, not a GPU's speed.

    python bench/bench_fused_ce.py                         # 2048 tokens, chunks of 1024 (the trainer's)
    python bench/bench_fused_ce.py --tokens 4096 --chunk 512 --dtype fp32
    python bench/bench_fused_ce.py --quick                 # a small head: checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from llmpipe.train.loss import CHUNK_TOKENS, linear_cross_entropy

LLAMA_1B = 2048, 128256  # dim, vocabulary (configs/train/llama-1b.yaml, its shards' tokenizer)


def rss_mib() -> float:
    """This process's resident memory now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """This process's peak resident memory since the last ``reset_peak``."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 2**10


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # 5: reset the peak RSS (Linux 4.0+)
        f.write("5")


def child(args: argparse.Namespace) -> dict[str, float]:
    torch.manual_seed(0)
    hidden = torch.randn(args.tokens, args.dim, requires_grad=True)
    weight = torch.randn(args.vocab, args.dim).mul_(0.02).requires_grad_()
    target = torch.randint(0, args.vocab, (args.tokens,))
    target[::10] = -100  # padding
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def call(n: int) -> float:
        hidden.grad = weight.grad = None
        with amp:
            if args.variant == "fused":
                loss = linear_cross_entropy(hidden[:n], weight, target[:n], chunk_tokens=args.chunk)
            else:
                logits = F.linear(hidden[:n], weight).float()
                loss = F.cross_entropy(logits, target[:n], ignore_index=-100, reduction="sum")
        loss.backward()
        return float(loss)

    call(min(64, args.tokens))  # kernels and thread pools started, not counted
    hidden.grad = weight.grad = None
    reset_peak()
    base = rss_mib()
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        loss = call(args.tokens)
        best = min(best, time.perf_counter() - t0)
    return {"peak_mib": peak_rss_mib() - base, "seconds": best, "loss": loss}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048, help="rows (llama-1b trains 4 x 2048 per micro-batch)")
    p.add_argument("--chunk", type=int, default=CHUNK_TOKENS, help="rows per chunk of the fused loss")
    p.add_argument("--dim", type=int, default=LLAMA_1B[0])
    p.add_argument("--vocab", type=int, default=LLAMA_1B[1])
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="bf16: autocast, as training")
    p.add_argument("--repeat", type=int, default=1, help="measured calls per variant (the best time)")
    p.add_argument("--quick", action="store_true", help="dim 256, 16,384 ids, 1024 tokens, chunks of 256")
    p.add_argument("--child", choices=["unfused", "fused"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.dim, args.vocab, args.tokens, args.chunk = 256, 16384, 1024, 256
    if args.child:
        args.variant = args.child
        print(json.dumps(child(args)))
        return 0
    forwarded = [f"--{k}={getattr(args, k)}" for k in ("tokens", "chunk", "dim", "vocab", "dtype", "repeat")]
    print(
        f"CPU ({torch.get_num_threads()} threads) | torch {torch.__version__} | head dim {args.dim} x "
        f"{args.vocab:,} ids, {args.tokens} tokens, {args.dtype}; fused in chunks of {args.chunk} tokens | "
        f"full fp32 logits alone: {args.tokens * args.vocab * 4 / 2**20:,.0f} MiB"
    )
    res = {}
    for variant in ("unfused", "fused"):
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *forwarded, f"--child={variant}"],
            capture_output=True,
            text=True,
            check=True,
        )
        res[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"| {'loss path':<10} | {'peak MiB':>9} | {'ratio':>5} | {'seconds':>8} | {'ratio':>5} |")
    print(f"|{'-' * 12}|{'-' * 11}|{'-' * 7}|{'-' * 10}|{'-' * 7}|")
    un = res["unfused"]
    for variant, r in res.items():
        print(
            f"| {variant:<10} | {r['peak_mib']:>9,.0f} | {r['peak_mib'] / un['peak_mib']:>5.2f} | "
            f"{r['seconds']:>8.2f} | {r['seconds'] / un['seconds']:>5.2f} |"
        )
    diff = abs(res["fused"]["loss"] - un["loss"]) / abs(un["loss"])
    print(
        f"losses: unfused {un['loss']:.6g}, fused {res['fused']['loss']:.6g} (relative difference {diff:.1e})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
