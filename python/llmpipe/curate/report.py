"""The funnel report: ``DIR/report.html`` (self-contained, inline SVG chart) and a terminal table.

Both read ``stats.json`` as written by the curate run: per stage, documents and tokens in, out and
dropped by reason (words before the tokenize stage, BPE tokens from it on), a few dropped examples
per reason, and the overall retention.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from llmpipe.data.format import atomic_write_bytes
from llmpipe.errors import InputError

BAR_COLORS = ("#3b7dd8", "#e07b39")


def read_stats(out_dir: Path) -> dict[str, Any]:
    """``out_dir/stats.json`` as a mapping, or one line saying why not (its values unchecked)."""
    p = Path(out_dir) / "stats.json"
    if not p.is_file():
        raise InputError(f"{out_dir}: no stats.json (is it the output directory of `llmpipe curate`?)")
    try:
        stats: Any = json.loads(p.read_text())
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InputError(f"{p}: not valid JSON: {e}") from e
    if not isinstance(stats, dict):
        raise InputError(f"{p}: not a curate stats file (no mapping)")
    return stats


def load_stats(out_dir: Path) -> dict[str, Any]:
    """``out_dir/stats.json`` with every value the funnel and the report read checked."""
    stats = read_stats(out_dir)
    p = Path(out_dir) / "stats.json"
    if "stages" not in stats:
        raise InputError(f"{p}: no 'stages' (not a curate stats file)")
    _check_stats(stats, p)
    return stats


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_stats(stats: dict[str, Any], p: Path) -> None:
    """The values the funnel and the report read have their types (a stranger's stats.json is data):
    else one line naming the first bad key."""

    def bad(key: str, value: object, want: str) -> InputError:
        return InputError(f"{p}: {key} is {json.dumps(value)[:80]}, not {want} (damaged or hand-edited?)")

    def counts(key: str, value: object) -> None:
        if not isinstance(value, dict) or not all(isinstance(k, str) and _count(n) for k, n in value.items()):
            raise bad(key, value, "a mapping of names to counts")

    stages = stats["stages"]
    if not isinstance(stages, list):
        raise bad("stages", stages, "a list")
    for i, st in enumerate(stages):
        where = f"stages[{i}]"
        if not isinstance(st, dict):
            raise bad(where, st, "a mapping")
        if not isinstance(st.get("name"), str):
            raise bad(f"{where}.name", st.get("name"), "a string")
        for k in ("docs_in", "docs_out", "tokens_in", "tokens_out"):
            if not _count(st.get(k)):
                raise bad(f"{where}.{k}", st.get(k), "a count")
        if not _count(st.get("modified", 0)):
            raise bad(f"{where}.modified", st.get("modified"), "a count")
        counts(f"{where}.dropped", st.get("dropped"))
        for k in ("dropped_tokens", "counters"):
            counts(f"{where}.{k}", st.get(k, {}))
        examples = st.get("examples", {})
        if not isinstance(examples, dict) or not all(
            isinstance(exs, list) and all(isinstance(x, dict) for x in exs) for exs in examples.values()
        ):
            raise bad(f"{where}.examples", examples, "a mapping of reasons to lists of records")
    ret = stats.get("retention", {})
    if not isinstance(ret, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in ret.values()
    ):
        raise bad("retention", ret, "a mapping of names to numbers")
    q = stats.get("quarantine", {})
    if not isinstance(q, dict) or not _count(q.get("records", 0)) or not isinstance(q.get("file", ""), str):
        raise bad("quarantine", q, "a mapping with a count of records and a file name")
    counts("quarantine.by_reason", q.get("by_reason", {}))
    if not isinstance(stats.get("tokens_unit", ""), str):
        raise bad("tokens_unit", stats.get("tokens_unit"), "a string")


def _pct(a: float, b: float) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def funnel_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per stage: counts, drops and the fraction of the run's input still there."""
    stages = stats["stages"]
    docs0 = stages[0]["docs_in"] if stages else 0
    rows = []
    for s in stages:
        dropped_docs = sum(s["dropped"].values())
        rows.append(
            {
                "name": s["name"],
                "docs_in": s["docs_in"],
                "docs_out": s["docs_out"],
                "docs_dropped": dropped_docs,
                "tokens_in": s["tokens_in"],
                "tokens_out": s["tokens_out"],
                "dropped": s["dropped"],
                "dropped_tokens": s.get("dropped_tokens", {}),
                "counters": s.get("counters", {}),
                "modified": s.get("modified", 0),
                "docs_left": s["docs_out"] / docs0 if docs0 else 0.0,
            }
        )
    return rows


def format_funnel(stats: dict[str, Any]) -> str:
    """The funnel as a plain-text table (what ``llmpipe report DIR`` prints)."""
    rows = funnel_rows(stats)
    head = f"{'stage':<18} {'docs in':>9} {'docs out':>9} {'dropped':>8} {'tokens in':>12} {'tokens out':>12}  drops"
    lines = [head, "-" * len(head)]
    for r in rows:
        drops = ", ".join(f"{k} {v:,}" for k, v in sorted(r["dropped"].items(), key=lambda kv: -kv[1]))
        extra = ", ".join(f"{k} {v:,}" for k, v in sorted(r["counters"].items()))
        extra = f"counts: {extra}" if extra else ""
        if r["modified"]:
            extra = f"modified {r['modified']:,}" + (f", {extra}" if extra else "")
        lines.append(
            f"{r['name']:<18} {r['docs_in']:>9,} {r['docs_out']:>9,} {r['docs_dropped']:>8,} "
            f"{r['tokens_in']:>12,} {r['tokens_out']:>12,}  {drops}" + (f" [{extra}]" if extra else "")
        )
    ret = stats.get("retention", {})
    if ret:
        lines.append("")
        lines.append(
            f"kept {ret.get('docs_out', 0):,} of {ret.get('docs_in', 0):,} documents "
            f"({_pct(ret.get('docs_out', 0), ret.get('docs_in', 0))}), {ret.get('words_out', 0):,} of "
            f"{ret.get('words_in', 0):,} words ({100 * ret.get('word_fraction', 0.0):.2f}% token retention), "
            f"{ret.get('tokens_out', 0):,} BPE tokens"
        )
    unit = stats.get("tokens_unit")
    if unit:
        lines.append(f"tokens: {unit}")
    q = stats.get("quarantine", {})
    if q.get("records"):
        lines.append(f"quarantined: {q['records']:,} records ({q.get('file', 'quarantine.jsonl')})")
    return "\n".join(lines)


def _chart(rows: list[dict[str, Any]]) -> str:
    """Horizontal bars: documents and tokens left after each stage, as a share of the stage before."""
    names = [r["name"] for r in rows]
    width, label_w, bar_w, row_h = 780, 150, 500, 34
    height = row_h * len(rows) + 40
    max_docs = max((r["docs_in"] for r in rows), default=1) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="funnel chart">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    for i, r in enumerate(rows):
        y = 10 + i * row_h
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 20}" text-anchor="end" font-family="sans-serif" '
            f'font-size="13" fill="#222">{html.escape(names[i])}</text>'
        )
        # grey: what came in; blue: documents out (scaled to the first stage); orange: tokens kept share
        w_in = bar_w * r["docs_in"] / max_docs
        w_out = bar_w * r["docs_out"] / max_docs
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{w_in:.1f}" height="14" fill="#d9d9d9"/>')
        parts.append(
            f'<rect x="{label_w}" y="{y + 4}" width="{w_out:.1f}" height="14" fill="{BAR_COLORS[0]}"/>'
        )
        tok_share = r["tokens_out"] / r["tokens_in"] if r["tokens_in"] else 1.0
        parts.append(
            f'<rect x="{label_w}" y="{y + 20}" width="{bar_w * min(tok_share, 1.0):.1f}" height="6" '
            f'fill="{BAR_COLORS[1]}"/>'
        )
        parts.append(
            f'<text x="{label_w + w_in + 6:.1f}" y="{y + 16}" font-family="sans-serif" font-size="11" '
            f'fill="#444">{r["docs_out"]:,} / {r["docs_in"]:,} docs</text>'
        )
    ly = height - 14
    parts.append(
        f'<rect x="{label_w}" y="{ly - 9}" width="12" height="10" fill="{BAR_COLORS[0]}"/>'
        f'<text x="{label_w + 16}" y="{ly}" font-family="sans-serif" font-size="11">documents out '
        f"(grey: in), scaled to the input</text>"
        f'<rect x="{label_w + 300}" y="{ly - 9}" width="12" height="10" fill="{BAR_COLORS[1]}"/>'
        f'<text x="{label_w + 316}" y="{ly}" font-family="sans-serif" font-size="11">share of the '
        f"stage's tokens kept</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def render_html(stats: dict[str, Any]) -> str:
    rows = funnel_rows(stats)
    ret = stats.get("retention", {})
    esc = html.escape
    out = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>llmpipe curate funnel</title>",
        "<style>body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
        "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:right;font-size:13px}td:first-child,th:first-child{text-align:left}"
        "pre{white-space:pre-wrap;background:#f6f6f6;padding:6px;font-size:12px;max-width:900px}"
        ".big{font-size:20px}</style></head><body>",
        "<h1>Curate funnel</h1>",
    ]
    if ret:
        out.append(
            f"<p class='big'>Token retention: <b>{100 * ret.get('word_fraction', 0.0):.2f}%</b> "
            f"({ret.get('words_out', 0):,} of {ret.get('words_in', 0):,} words); documents "
            f"{ret.get('docs_out', 0):,} of {ret.get('docs_in', 0):,} "
            f"({_pct(ret.get('docs_out', 0), ret.get('docs_in', 0))}); "
            f"{ret.get('tokens_out', 0):,} BPE tokens in the shards.</p>"
        )
    if stats.get("tokens_unit"):
        out.append(f"<p>Tokens: {esc(stats['tokens_unit'])}.</p>")
    out.append(_chart(rows))
    out.append(
        "<table><tr><th>stage</th><th>docs in</th><th>docs out</th><th>dropped</th><th>tokens in</th>"
        "<th>tokens out</th><th>tokens dropped</th><th>docs left (of input)</th></tr>"
    )
    for r in rows:
        out.append(
            f"<tr><td>{esc(r['name'])}</td><td>{r['docs_in']:,}</td><td>{r['docs_out']:,}</td>"
            f"<td>{r['docs_dropped']:,}</td><td>{r['tokens_in']:,}</td><td>{r['tokens_out']:,}</td>"
            f"<td>{sum(r['dropped_tokens'].values()):,}</td><td>{100 * r['docs_left']:.1f}%</td></tr>"
        )
    out.append("</table>")
    out.append("<h2>Drops by reason</h2>")
    out.append("<table><tr><th>stage</th><th>reason</th><th>docs</th><th>tokens</th></tr>")
    for r in rows:
        for reason, n in sorted(r["dropped"].items(), key=lambda kv: -kv[1]):
            out.append(
                f"<tr><td>{esc(r['name'])}</td><td>{esc(reason)}</td><td>{n:,}</td>"
                f"<td>{r['dropped_tokens'].get(reason, 0):,}</td></tr>"
            )
    out.append("</table>")
    counted = [(r["name"], key, n) for r in rows for key, n in sorted(r["counters"].items())]
    if counted:  # what a stage counts besides its drops (kept documents per language ...): not drops
        out.append("<h2>Other counts</h2>")
        out.append("<table><tr><th>stage</th><th>count</th><th>docs</th></tr>")
        for name, key, n in counted:
            out.append(f"<tr><td>{esc(name)}</td><td>{esc(key)}</td><td>{n:,}</td></tr>")
        out.append("</table>")
    out.append("<h2>Dropped examples</h2>")
    for s in stats["stages"]:
        for reason, exs in sorted(s.get("examples", {}).items()):
            out.append(f"<details><summary>{esc(s['name'])}: {esc(reason)} ({len(exs)})</summary>")
            for ex in exs:
                extra = {k: v for k, v in ex.items() if k not in ("id", "text")}
                meta = ", ".join(f"{k}={v}" for k, v in extra.items())
                out.append(
                    f"<p><b>{esc(str(ex.get('id', '')))}</b> {esc(meta)}</p><pre>{esc(ex.get('text', ''))}</pre>"
                )
            out.append("</details>")
    q = stats.get("quarantine", {})
    if q.get("records"):
        out.append(f"<h2>Quarantine</h2><p>{q['records']:,} records in {esc(q.get('file', ''))}: ")
        out.append(", ".join(f"{esc(k)} {v:,}" for k, v in q.get("by_reason", {}).items()) + "</p>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(out_dir: Path, stats: dict[str, Any]) -> Path:
    """Write ``out_dir/report.html`` (atomically) and return its path."""
    path = Path(out_dir) / "report.html"
    atomic_write_bytes(path, render_html(stats).encode("utf-8"))
    return path
