"""``llmpipe report DIR``: the funnel of a curate run in the terminal (and ``--html`` to rewrite report.html)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "report",
        help="print the funnel of a curate output directory",
        description="Print, per stage, documents and tokens in, out and dropped by reason, and the overall "
        "token retention, from DIR/stats.json.",
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="output directory of `llmpipe curate`")
    p.add_argument("--html", action="store_true", help="also (re)write DIR/report.html")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmpipe.curate.report import format_funnel, load_stats, write_report

    stats = load_stats(args.dir)
    print(format_funnel(stats))
    if args.html:
        print(f"wrote {write_report(args.dir, stats)}")
    return 0
