"""Data ablations (DCLM's method): one proxy model per curated shard directory, the same model config,
token budget and seed, scored in bits per byte on the same reference text.

    Ablation(dirs, out, reference=[...], config=...).run()   # or `llmpipe ablate DIR... --out ABL`

Each proxy trains with ``torchrun -m llmpipe.train`` into ``ABL/proxies/NAME`` and writes
``ABL/proxies/NAME/result.json`` (its training command and config, the evaluation) last, by atomic
rename: a proxy with that file is finished and a rerun skips it. The table is ``ABL/results.json`` and
``ABL/results.csv``; ``ABL/report.html`` charts bits per byte and puts the curation funnels side by side.
"""

from __future__ import annotations

import csv
import html
import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmpipe.curate.report import load_stats
from llmpipe.data.format import atomic_write_bytes, read_manifest
from llmpipe.errors import ConfigError, InputError, LlmpipeError

COLORS = ("#3b7dd8", "#e07b39", "#3aa55d", "#c44e52", "#8172b3", "#937860")


@dataclass
class Proxy:
    name: str
    shards: Path
    run: Path
    steps: int
    command: list[str]


@dataclass
class Ablation:
    dirs: Sequence[Path]
    out: Path
    reference: Sequence[Path]
    config: Path = Path("tiny")  # a train config file or a packaged name
    tokens: int = 200_000  # training tokens per proxy
    seed: int = 0
    nproc: int = 1  # torchrun processes per proxy
    batch_size: int = 8
    overrides: Sequence[str] = ()  # more --section.key=value for every proxy
    max_docs: int | None = None  # per reference file
    ray_address: str | None = None
    proxies: list[Proxy] = field(default_factory=list)

    def plan(self) -> list[Proxy]:
        if len(self.dirs) < 2:
            raise ConfigError("an ablation compares two or more shard directories")
        if not self.reference:
            raise ConfigError("an ablation needs reference text: --text FILE...")
        for f in self.reference:
            if not Path(f).is_file():
                raise InputError(f"{f}: no such reference file")
        names: list[str] = []
        proxies = []
        for d in self.dirs:
            seq_len = int(read_manifest(Path(d))["seq_len"])
            load_stats(Path(d))  # read after its proxy trains: a damaged one is said before any training
            name = Path(d).resolve().name or "shards"
            while name in names:
                name = f"{name}_{len(names)}"
            names.append(name)
            steps = max(1, math.ceil(self.tokens / (self.batch_size * self.nproc * seq_len)))
            run = self.out / "proxies" / name
            cmd = [
                "--nproc_per_node", str(self.nproc), "--master_addr=127.0.0.1", "-m", "llmpipe.train",
                "--data", str(Path(d).resolve()), "--config", str(self.config), "--out", str(run.resolve()),
                f"--train.steps={steps}", f"--train.seed={self.seed}", f"--data.seed={self.seed}",
                f"--data.batch_size={self.batch_size}", "--train.val_every=0", "--checkpoint.every=0",
                "--checkpoint.keep=1", *(f"--{o.removeprefix('--')}" for o in self.overrides),
            ]  # fmt: skip
            proxies.append(Proxy(name, Path(d), run, steps, cmd))
        self.proxies = proxies
        return proxies

    def run(self) -> list[dict[str, Any]]:
        proxies = self.plan()
        self.out.mkdir(parents=True, exist_ok=True)
        todo = [p for p in proxies if not (p.run / "result.json").is_file()]
        if self.ray_address is not None and todo:
            import ray

            try:
                ray.init(address=self.ray_address, ignore_reinit_error=True)
            except ConnectionError as e:
                from llmpipe.distributed.executor import auth_hint

                raise InputError(
                    f"--ray {self.ray_address}: cannot connect to a Ray cluster ({e}){auth_hint(self.ray_address)}"
                ) from e
            task = ray.remote(num_cpus=self.nproc, max_retries=2)(_proxy_task)
            ray.get([task.remote(self._job(p)) for p in todo])
        else:
            for p in todo:
                _proxy_task(self._job(p))
        rows = [json.loads((p.run / "result.json").read_text()) for p in proxies]
        self.write(rows)
        return rows

    def _job(self, p: Proxy) -> dict[str, Any]:
        return {
            "name": p.name,
            "shards": str(p.shards.resolve()),
            "run": str(p.run.resolve()),
            "steps": p.steps,
            "torchrun_args": p.command,
            "reference": [str(Path(f).resolve()) for f in self.reference],
            "max_docs": self.max_docs,
            "tokens_budget": self.tokens,
            "seed": self.seed,
        }

    def write(self, rows: list[dict[str, Any]]) -> None:
        atomic_write_bytes(self.out / "results.json", (json.dumps(rows, indent=2) + "\n").encode())
        cols = [
            "name",
            "bpb",
            "loss",
            "eval_tokens",
            "eval_bytes",
            "steps",
            "train_tokens",
            "retention",
            "shards",
        ]
        with open(self.out / "results.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols)
            for r in rows:
                w.writerow([r["name"], f"{r['bpb']:.6f}", f"{r['loss']:.6f}", r["eval_tokens"], r["eval_bytes"],
                            r["steps"], r["train_tokens"], r["retention"], r["shards"]])  # fmt: skip
        atomic_write_bytes(self.out / "report.html", render_html(rows).encode("utf-8"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _proxy_task(job: dict[str, Any]) -> None:
    """Train one proxy (torchrun in a subprocess), evaluate it, write its result.json last."""
    from llmpipe.eval import Evaluator, load_lm, read_texts

    run = Path(job["run"])
    run.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--master_port={_free_port()}",
        *job["torchrun_args"],
    ]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open(run / "train.log", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=run)
    if proc.returncode != 0:
        tail = (run / "train.log").read_text()[-2000:]
        raise LlmpipeError(
            f"proxy {job['name']}: training failed ({proc.returncode}); {run / 'train.log'}:\n{tail}"
        )
    ev = Evaluator(load_lm(run, device="cpu"), batch_size=16)
    groups = {f: read_texts(f, max_docs=job["max_docs"]) for f in job["reference"]}
    per = ev.groups(groups)
    total = sum(per.values(), type(next(iter(per.values())))(0.0, 0, 0, 0))
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    stats = load_stats(Path(job["shards"]))
    seq_len = int(read_manifest(Path(job["shards"]))["seq_len"])
    result = {
        "name": job["name"],
        "shards": job["shards"],
        "bpb": total.bpb,
        "loss": total.loss,
        "eval_tokens": total.tokens,
        "eval_bytes": total.bytes,
        "per_reference": {k: v.to_dict() for k, v in per.items()},
        "steps": job["steps"],
        "train_tokens": sum(1 for m in metrics if "loss" in m)
        and job["steps"] * _tokens_per_step(job, seq_len),
        "final_train_loss": next((m["loss"] for m in reversed(metrics) if "loss" in m), None),
        "retention": stats.get("retention", {}).get("word_fraction"),
        "stats": stats,
        "job": job,
        "config": (run / "config.yaml").read_text(),
    }
    atomic_write_bytes(run / "result.json", (json.dumps(result, indent=2) + "\n").encode())


def _tokens_per_step(job: dict[str, Any], seq_len: int) -> int:
    args = job["torchrun_args"]
    nproc = int(args[args.index("--nproc_per_node") + 1])
    batch = next(int(a.split("=", 1)[1]) for a in args if a.startswith("--data.batch_size="))
    return nproc * batch * seq_len


def _bpb_chart(rows: list[dict[str, Any]]) -> str:
    width, label_w, bar_w, row_h = 720, 180, 440, 34
    height = row_h * len(rows) + 30
    top = max(r["bpb"] for r in rows) or 1.0
    best = min(r["bpb"] for r in rows)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for i, r in enumerate(rows):
        y = 10 + i * row_h
        w = bar_w * r["bpb"] / top
        color = COLORS[i % len(COLORS)]
        mark = " (best)" if r["bpb"] == best else ""
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 20}" text-anchor="end" font-size="13">{html.escape(r["name"])}</text>'
        )
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{w:.1f}" height="22" fill="{color}"/>')
        parts.append(
            f'<text x="{label_w + w + 6:.1f}" y="{y + 20}" font-size="13">{r["bpb"]:.4f}{mark}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _funnel_table(r: dict[str, Any]) -> str:
    from llmpipe.curate.report import funnel_rows

    body = []
    for s in funnel_rows(r["stats"]):
        drops = ", ".join(f"{k} {v:,}" for k, v in sorted(s["dropped"].items(), key=lambda kv: -kv[1]))
        body.append(
            f"<tr><td>{html.escape(s['name'])}</td><td>{s['docs_in']:,}</td><td>{s['docs_out']:,}</td>"
            f"<td>{100 * s['docs_left']:.1f}%</td><td class=d>{html.escape(drops)}</td></tr>"
        )
    ret = r["stats"].get("retention", {})
    return (
        f"<div class=col><h3>{html.escape(r['name'])}</h3><p>{html.escape(r['shards'])}</p>"
        f"<p>kept {ret.get('docs_out', 0):,} of {ret.get('docs_in', 0):,} documents, "
        f"{100 * (ret.get('word_fraction') or 0):.1f}% of words</p>"
        "<table><tr><th>stage</th><th>docs in</th><th>out</th><th>left</th><th>drops</th></tr>"
        + "".join(body)
        + "</table></div>"
    )


def render_html(rows: list[dict[str, Any]]) -> str:
    table = "".join(
        f"<tr><td>{html.escape(r['name'])}</td><td>{r['bpb']:.4f}</td><td>{r['loss']:.4f}</td>"
        f"<td>{r['steps']}</td><td>{r['train_tokens']:,}</td>"
        f"<td>{100 * (r['retention'] or 0):.1f}%</td><td>{r['eval_bytes']:,}</td></tr>"
        for r in rows
    )
    refs = ", ".join(html.escape(Path(f).name) for f in rows[0]["job"]["reference"]) if rows else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>llmpipe ablation</title>
<style>body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse;margin:8px 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}} td:first-child,th:first-child{{text-align:left}}
td.d{{text-align:left;font-size:12px;max-width:260px}} .cols{{display:flex;gap:24px;align-items:flex-start}}
.col{{flex:1}}</style></head><body>
<h1>Data ablation</h1>
<p>One proxy model per curation: the same model config, token budget and seed; bits per byte (lower is
better) on the same reference text ({refs}).</p>
<h2>Bits per byte</h2>
{_bpb_chart(rows)}
<table><tr><th>curation</th><th>bits per byte</th><th>loss (nats/token)</th><th>steps</th>
<th>train tokens</th><th>word retention</th><th>eval bytes</th></tr>{table}</table>
<h2>Curation funnels</h2>
<div class=cols>{"".join(_funnel_table(r) for r in rows)}</div>
</body></html>
"""
