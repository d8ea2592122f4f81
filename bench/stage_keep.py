"""What each curate stage of a bench run saw and kept, to print beside the run's speed.

    python bench/stage_keep.py CURATE_OUT     # the same for any curate output directory

A speed measured on a corpus where a stage drops nearly everything says little about the stages after
it: they barely run. ``keep_lines(stats)`` gives one line per stage (documents in, kept, the share kept)
from a run's stats.json, and a warning for every stage that saw under ``STARVED`` of the documents the
read stage passed on (WARC request records and the like do not count) or kept under ``STARVED`` of those
it saw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STARVED = 0.05  # a stage seeing or keeping less than this share of the documents is flagged


def load_stats(out: Path) -> dict[str, Any]:
    """The stats.json of a curate output directory."""
    return dict(json.loads((out / "stats.json").read_text()))


def keep_lines(stats: dict[str, Any], indent: str = "  ") -> list[str]:
    """One line per stage, ``read`` first: documents in -> kept (share), the main drop reason; then the
    warnings."""
    stages = stats["stages"]
    first = stages[0]["docs_out"] or 1
    lines, warnings = [], []
    for s in stages:
        din, dout = s["docs_in"], s["docs_out"]
        share = dout / din if din else 0.0
        reasons = sorted(s.get("dropped", {}).items(), key=lambda kv: -kv[1])
        why = f"; most dropped as {reasons[0][0]} ({reasons[0][1]:,})" if reasons and reasons[0][1] else ""
        lines.append(f"{indent}{s['name']:18s} {din:>9,} -> {dout:>9,} kept ({100 * share:5.1f}%){why}")
        if din < STARVED * first:
            warnings.append(
                f"{indent}NOTE: {s['name']} saw {din:,} of the {first:,} documents read: its speed here says little"
            )
        elif din and share < STARVED:
            warnings.append(
                f"{indent}NOTE: {s['name']} kept {dout:,} of {din:,}: every stage after it barely runs on this corpus"
            )
    return lines + warnings


def keep_summary(stats: dict[str, Any]) -> str:
    """The run's documents kept in one phrase, for a line of a table."""
    r = stats["retention"]
    return f"kept {r['docs_out']:,} of {r['docs_in']:,} documents ({100 * r['doc_fraction']:.1f}%)"


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        raise SystemExit(
            "usage: python bench/stage_keep.py CURATE_OUT  (what each stage of that run saw and kept)"
        )
    print("\n".join(keep_lines(load_stats(Path(sys.argv[1])))))
