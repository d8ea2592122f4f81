"""``llmpipe sweep SWEEP.yaml``: hyperparameter search on Ray Tune, each trial a trainer run."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "sweep",
        help="hyperparameter search (grid, random, Optuna TPE; ASHA) over trainer runs on Ray Tune",
        description=(
            "Run a search over trainer keys described by SWEEP.yaml on a local or remote Ray cluster: each "
            "trial is a trainer run (one process or a torchrun gang), ASHA stops the worst trials on "
            "validation loss, and OUT gets results.csv, results.json, plot.html and best.yaml. Running it "
            "again on the same OUT resumes. The file's keys: docs/scaling-laws.md."
        ),
    )
    p.add_argument("sweep", type=Path, metavar="SWEEP.yaml")
    p.add_argument("--out", type=Path, help="the sweep directory (overrides out: in the file)")
    p.add_argument("--address", help="Ray cluster address (overrides address: in the file)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmpipe.tune.sweep import load_sweep, run_sweep

    cfg = load_sweep(args.sweep, args.out)
    if args.address:
        cfg.address = args.address
    summary = run_sweep(cfg)
    metric = summary["metric"]
    print(f"{'trial':>14} {'status':>9} {'steps':>6} {metric:>9}  config")
    for row in summary["trials"]:
        value = "-" if row[metric] is None else f"{row[metric]:.4f}"
        print(f"{row['trial_id']:>14} {row['status']:>9} {row['steps']:>6} {value:>9}  {row['config']}")
    best = summary["best"]
    if best is not None:
        print(f"best: {best['trial_id']} {metric} {best[metric]:.4f}; config: {cfg.out}/best.yaml")
    return 0
