"""``llmpipe scaling LADDER.yaml``: train a ladder of sizes x budgets, fit scaling laws, plan a budget."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llmpipe.plan import human


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "scaling",
        help="train a model ladder (sizes x token budgets) on Ray and fit Chinchilla scaling laws",
        description=(
            "Train every model size x budget of LADDER.yaml as sweep trials, fit L(N, D) = E + A/N^alpha + "
            "B/D^beta (Chinchilla Approach 3) and the IsoFLOP minima (Approach 1), and report the "
            "compute-optimal parameters and tokens for the FLOP budget with bootstrap intervals. Writes "
            "OUT/fit.json (give it to `llmpipe plan --scaling`) and OUT/scaling.png. See docs/scaling-laws.md."
        ),
    )
    p.add_argument("ladder", type=Path, metavar="LADDER.yaml")
    p.add_argument("--out", type=Path, help="the ladder directory (overrides out: in the file)")
    p.add_argument("--address", help="Ray cluster address (overrides address: in the file)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmpipe.tune.ladder import load_ladder, run_ladder

    cfg = load_ladder(args.ladder, args.out)
    if args.address:
        cfg.address = args.address
    r = run_ladder(cfg)
    for line in report(r):
        print(line)
    print(f"wrote {cfg.out}/fit.json and {cfg.out}/scaling.png")
    return 0


def report(r: dict[str, Any]) -> list[str]:
    """The fit of ``fit_ladder`` in words: the law, the outliers and the rule that flagged them, Approach 1,
    the compute-optimal allocation and the constants with their bootstrap intervals."""
    f, o = r["approach3"], r["optimum"]
    left_out = f", {len(f['outliers'])} left out" if f["dropped"] else ""
    lines = [
        f"Approach 3: L(N, D) = {f['E']:.4g} + {f['A']:.4g} / N^{f['alpha']:.4g} + {f['B']:.4g} / D^{f['beta']:.4g}"
        f" ({len(r['points'])} points{left_out})"
    ]
    rule = f"modified z-score of the log-loss residual > {f['outlier_z']:g}"
    if f["outliers"]:
        what = (
            "left out of the fit" if f["dropped"] else "kept in the fit; drop_outliers: true leaves them out"
        )
        shown = ", ".join(str(i) for i in f["outliers"][:10]) + (" ..." if len(f["outliers"]) > 10 else "")
        lines.append(f"outliers: {len(f['outliers'])} points ({rule}), {what}: {shown}")
    else:
        lines.append(f"outliers: none ({rule})")
    a1 = r["approach1"]
    if "error" in a1:
        lines.append(f"Approach 1: {a1['error']}")
    else:
        lines.append(
            f"Approach 1: N_opt = {a1['k']:.4g} C^{a1['a']:.4g}; at {o['flops']:.3g} FLOPs N = {human(a1['optimal_params'])}"
        )
    lo, hi = o["params_interval"]
    dlo, dhi = o["tokens_interval"]
    rlo, rhi = o["ratio_interval"]
    lines.append(
        f"compute-optimal at {o['flops']:.3g} FLOPs: N = {human(o['params'])} [{human(lo)}, {human(hi)}], "
        f"D = {human(o['tokens'])} [{human(dlo)}, {human(dhi)}], D/N = {o['tokens_per_param']:.3g} "
        f"[{rlo:.3g}, {rhi:.3g}] (5-95%, {o['bootstrap']} bootstrap refits)"
    )
    ci = o["constant_intervals"]
    lines.append(
        "constants, 5-95%: " + ", ".join(f"{k} {f[k]:.4g} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in ci.items())
    )
    return lines
