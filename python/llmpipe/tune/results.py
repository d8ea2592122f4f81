"""A finished sweep's outputs: results.csv / results.json (one row per trial), plot.html (validation
curves, ASHA-stopped trials dashed) and best.yaml (the best trial's full trainer config)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from llmpipe.tune.space import overrides


def read_curve(run_dir: Path, metric: str, bytes_per_token: float) -> list[tuple[int, float]]:
    """(step, metric) for every validation record of a trial's trainer run."""
    from llmpipe.tune.trial import metrics_record

    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    curve: dict[int, float] = {}
    for line in path.read_text().splitlines():
        rec = metrics_record(json.loads(line), bytes_per_token) if line.strip() else None
        if rec is not None and metric in rec:
            curve[rec["step"]] = rec[metric]  # a resumed run may repeat a step: keep the latest
    return sorted(curve.items())


def _trial_id(result: Any, out: Path) -> str:
    """The trial's id from its last result, or (none reported) from the launch log holding its config."""
    tid = (result.metrics or {}).get("trial_id")
    if tid:
        return str(tid)
    for launches in sorted((out / "trials").glob("*/launches.jsonl")):
        first = launches.read_text().splitlines()[0]
        if json.loads(first)["config"] == dict(result.config):
            return launches.parent.name
    return "?"


def trial_rows(
    out: Path, grid: Any, metric: str, bytes_per_token: float, max_steps: int
) -> list[dict[str, Any]]:
    rows = []
    for r in grid:
        trial_id = _trial_id(r, out)
        run_dir = out / "trials" / str(trial_id)
        curve = read_curve(run_dir, metric, bytes_per_token)
        told = (r.metrics or {}).get("step")  # the last step Tune saw: an ASHA stop came after it
        if told is not None:
            curve = [(s, v) for s, v in curve if s <= int(told)]
        launches = run_dir / "launches.jsonl"
        last_step = curve[-1][0] if curve else 0
        steps = int(r.config.get("train.steps", max_steps))  # a ladder varies the budget per trial
        rows.append(
            {
                "trial_id": trial_id,
                "status": "error" if r.error else ("completed" if last_step >= steps else "stopped"),
                "steps": last_step,
                metric: curve[-1][1] if curve else None,
                f"best_{metric}": min(v for _, v in curve) if curve else None,
                "launches": len(launches.read_text().splitlines()) if launches.is_file() else 0,
                "config": dict(r.config),
                "curve": curve,
                "run_dir": str(run_dir),
            }
        )
    rows.sort(key=lambda row: (row[metric] is None, row["status"] != "completed", row[metric] or 0.0))
    return rows


def _plot_png(rows: list[dict[str, Any]], metric: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for row in rows:
        if not row["curve"]:
            continue
        steps, values = zip(*row["curve"], strict=True)
        style = "-" if row["status"] == "completed" else "--"
        ax.plot(steps, values, style, marker="o", ms=3, label=f"{row['trial_id']} ({row['status']})")
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title("validation curves (dashed: stopped early by ASHA)")
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def write_html(path: Path, rows: list[dict[str, Any]], metric: str) -> None:
    png = base64.b64encode(_plot_png(rows, metric)).decode()
    keys = sorted({k for row in rows for k in row["config"]})
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["trial", "status", "steps", metric, *keys])
    body = []
    for row in rows:
        cells = [
            row["trial_id"],
            row["status"],
            row["steps"],
            row[metric],
            *[row["config"].get(k) for k in keys],
        ]
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>llmpipe sweep</title></head><body>"
        f"<h1>llmpipe sweep: {len(rows)} trials</h1><img alt='validation curves' src='data:image/png;base64,{png}'>"
        f"<table border='1'><tr>{head}</tr>{''.join(body)}</table></body></html>\n"
    )


def write_results(out: Path, grid: Any, cfg: Any, configs: Any, *, max_steps: int) -> dict[str, Any]:
    """Write results.csv, results.json, plot.html and best.yaml under ``out``; return the summary."""
    metric = cfg.metric
    rows = trial_rows(out, grid, metric, cfg.bytes_per_token, max_steps)
    keys = sorted({k for row in rows for k in row["config"]})
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trial_id", "status", "steps", metric, f"best_{metric}", "launches", *keys])
        for row in rows:
            w.writerow(
                [
                    row["trial_id"],
                    row["status"],
                    row["steps"],
                    row[metric],
                    row[f"best_{metric}"],
                    row["launches"],
                ]
                + [row["config"].get(k) for k in keys]
            )
    best = next((row for row in rows if row[metric] is not None), None)
    summary = {"metric": metric, "best": best, "trials": rows}
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_html(out / "plot.html", rows, metric)
    if best is not None:
        (out / "best.yaml").write_text(configs.dump(overrides(best["config"])))
    return summary
