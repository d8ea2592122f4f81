"""``llmpipe ablate DIR1 DIR2 ... --out ABL --text REF...``: which curation trains the better model."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "ablate",
        help="train one proxy model per shard directory and compare them in bits per byte",
        description="For each shard directory (curations of the same raw data under different configs) "
        "train a proxy model with the same model config, token budget and seed (torchrun, one after the "
        "other, or as Ray tasks with --ray), evaluate each on the same reference text, and write "
        "ABL/results.json, ABL/results.csv and ABL/report.html (a bits-per-byte chart and the curation "
        "funnels side by side). Finished proxies are skipped when the command is run again.",
    )
    p.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="shard directories of `llmpipe curate`")
    p.add_argument("--out", type=Path, required=True, help="ablation directory")
    p.add_argument("--text", type=Path, nargs="+", required=True, metavar="FILE", help="reference text/JSONL")
    p.add_argument(
        "--config",
        type=Path,
        default=Path("tiny"),
        help="proxy train config: a file or a packaged name (default: tiny)",
    )
    p.add_argument("--tokens", type=float, default=200_000, help="training tokens per proxy (default 200000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nproc", type=int, default=1, help="torchrun processes per proxy (default 1)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per process per step")
    p.add_argument("--max-docs", type=int, default=None, help="reference documents per file")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override, repeatable"
    )
    p.add_argument(
        "--ray", default=None, metavar="ADDRESS", help="train the proxies as tasks on this Ray cluster"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmpipe.ablate import Ablation

    rows = Ablation(
        dirs=args.dirs, out=args.out, reference=args.text, config=args.config, tokens=int(args.tokens),
        seed=args.seed, nproc=args.nproc, batch_size=args.batch_size, overrides=args.set,
        max_docs=args.max_docs, ray_address=args.ray,
    ).run()  # fmt: skip
    for r in sorted(rows, key=lambda r: r["bpb"]):
        print(
            f"{r['name']:<24} bpb {r['bpb']:.4f}  loss {r['loss']:.4f}  retention {100 * (r['retention'] or 0):.1f}%"
        )
    print(f"wrote {args.out / 'report.html'}")
    return 0
