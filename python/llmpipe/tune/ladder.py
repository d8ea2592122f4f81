"""``llmpipe scaling LADDER.yaml``: a ladder of model sizes x training budgets, trained as sweep trials,
then the Chinchilla fits (tune/scaling.py) and the compute-optimal allocation of a FLOP budget.

    sizes:  [{dim: 32, n_layers: 1, n_heads: 2}, {dim: 64, n_layers: 2, n_heads: 4}, ...]  # model keys
    steps:  [40, 80]                                                                     # budgets
    flops:  1.0e18                                                                       # the budget to plan for

Every (size, steps) pair is one trial of a grid sweep (no early stopping). Each validation record of
each run after ``min_step`` is a point (N, D, loss): N counts the parameters used in matmuls (all but
the embedding lookup, as in train/metrics.py), D = step x tokens per step (batch x seq_len x ranks x
grad_accum). Points along one run come from a single cosine schedule, so intermediate points are not
the runs a schedule of that length would give (Chinchilla fits only final points of separately tuned
runs); at tiny scale they are what makes five parameters identifiable.

OUT gets the sweep's files plus fit.json (points, Approach 3, Approach 1, the optimum with bootstrap
intervals) and scaling.png (loss against FLOPs per size with the fitted law; N_opt against C).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from llmpipe.errors import ConfigError, InputError
from llmpipe.plan import ModelShape
from llmpipe.tune.scaling import OUTLIER_Z, ChinchillaFit, compute_optimal, fit_chinchilla, isoflop_minima
from llmpipe.tune.sweep import AshaConfig, SweepConfig, load_runs_file


@dataclass
class LadderConfig:
    data: Path | None = None
    out: Path | None = None
    trainer_config: Path | None = None
    fixed: dict[str, Any] = field(default_factory=dict)
    sizes: list[dict[str, Any]] = field(default_factory=list)  # model-section overrides per rung
    steps: list[int] = field(default_factory=list)  # training budgets in optimizer steps
    min_step: int = 1  # validation records before this step are not fitted
    flops: float = 1e18  # the FLOP budget to report the compute-optimal N and D for
    bootstrap: int = 50  # resamples of the points for the 5-95% intervals
    seed: int = 0  # of the bootstrap resampling
    drop_outliers: bool = False  # leave flagged outliers out of the fit (they are always reported)
    outlier_z: float = OUTLIER_Z  # flag a point whose log-loss residual has a modified z-score above this
    metric: Literal["val_loss", "val_bpb"] = "val_loss"
    bytes_per_token: float = 0.0
    nproc: int = 1
    cpus_per_trial: float = 0.0
    max_concurrent: int = 0
    address: str | None = None
    trainer: Path | None = None


def load_ladder(path: Path, out: Path | None = None) -> LadderConfig:
    cfg = load_runs_file(LadderConfig, path, out)
    if len(cfg.sizes) < 3 or len(cfg.steps) < 1:
        raise ConfigError(f"{path}: a ladder needs at least 3 sizes and 1 budget (steps)")
    if any(s < 1 for s in cfg.steps) or cfg.flops <= 0 or not cfg.outlier_z > 0:
        raise ConfigError(f"{path}: steps, flops and outlier_z must be positive")
    return cfg


def as_sweep(cfg: LadderConfig) -> SweepConfig:
    return SweepConfig(
        data=cfg.data,
        out=cfg.out,
        trainer_config=cfg.trainer_config,
        fixed=cfg.fixed,
        space={"model": {"grid": cfg.sizes}, "train.steps": {"grid": cfg.steps}},
        search="grid",
        metric=cfg.metric,
        bytes_per_token=cfg.bytes_per_token,
        asha=AshaConfig(enabled=False),
        nproc=cfg.nproc,
        cpus_per_trial=cfg.cpus_per_trial,
        max_concurrent=cfg.max_concurrent,
        address=cfg.address,
        trainer=cfg.trainer,
    )


def run_points(trials: list[dict[str, Any]], metric: str, min_step: int) -> list[dict[str, float]]:
    """(params, tokens, loss) for every validation record of every run, from its saved config."""
    import yaml

    points = []
    for row in trials:
        run_dir = Path(row["run_dir"])
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        m, d, t = saved["model"], saved["data"], saved["train"]
        shape = ModelShape.llama(
            m["dim"], m["n_layers"], m["n_heads"], m["vocab_size"], n_kv_heads=m["n_kv_heads"],
            ffn_hidden=m["ffn_hidden"], multiple_of=m["multiple_of"], tie_embeddings=m["tie_embeddings"],
        )  # fmt: skip
        lookup = 0 if m["tie_embeddings"] else m["vocab_size"] * m["dim"]
        ranks = int(row.get("ranks", 1))
        per_step = d["batch_size"] * m["max_seq_len"] * t["grad_accum"] * ranks
        for step, loss in row["curve"]:
            if step >= min_step:
                n = shape.params - lookup
                points.append({"params": float(n), "tokens": float(step * per_step), "loss": float(loss),
                               "step": step, "trial_id": row["trial_id"]})  # fmt: skip
    return points


def fit_ladder(
    points: list[dict[str, float]],
    flops: float,
    bootstrap: int,
    drop_outliers: bool = False,
    outlier_z: float = OUTLIER_Z,
    seed: int = 0,
) -> dict[str, Any]:
    if len(points) < 5:
        raise InputError(f"{len(points)} (N, D, loss) points: too few to fit (need 5); train longer")
    n = [p["params"] for p in points]
    d = [p["tokens"] for p in points]
    loss = [p["loss"] for p in points]
    fit = fit_chinchilla(n, d, loss, drop_outliers=drop_outliers, outlier_z=outlier_z)
    result: dict[str, Any] = {"points": points, "approach3": fit.to_dict()}
    try:
        env = isoflop_minima(n, d, loss)
        n1, d1 = env.optimal(flops)
        result["approach1"] = {**env.to_dict(), "optimal_params": n1, "optimal_tokens": d1}
    except InputError as e:  # Approach 1 needs 3 sizes reaching one FLOP count; Approach 3 stands alone
        result["approach1"] = {"error": str(e)}
    result["optimum"] = compute_optimal(fit, n, d, loss, flops, bootstrap=bootstrap, seed=seed).to_dict()
    return result


def plot(path: Path, result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fit = ChinchillaFit(**result["approach3"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    sizes = sorted({p["params"] for p in result["points"]})
    for size in sizes:
        pts = sorted((p["tokens"], p["loss"]) for p in result["points"] if p["params"] == size)
        d = np.array([t for t, _ in pts])
        line = ax1.plot(6 * size * d, [v for _, v in pts], "o", ms=3, label=f"N = {size:,.0f}")[0]
        grid = np.geomspace(d.min(), d.max(), 50)
        ax1.plot(6 * size * grid, fit.loss(size, grid), "-", color=line.get_color(), lw=1)
    ax1.set_xscale("log")
    ax1.set_xlabel("training FLOPs (6 N D)")
    ax1.set_ylabel("validation loss")
    ax1.set_title(f"L = {fit.E:.3g} + {fit.A:.3g}/N^{fit.alpha:.3g} + {fit.B:.3g}/D^{fit.beta:.3g}")
    ax1.legend(fontsize=7)
    flops = [6 * p["params"] * p["tokens"] for p in result["points"]] + [result["optimum"]["flops"]]
    cs = np.geomspace(min(flops), max(flops), 50)
    ax2.plot(cs, [fit.optimal_params(c) for c in cs], "-", label="Approach 3 (parametric)")
    a1 = result["approach1"]
    if "minima" in a1:
        ax2.plot([m["flops"] for m in a1["minima"]], [m["params"] for m in a1["minima"]], "s",
                 label="Approach 1 (IsoFLOP minima)")  # fmt: skip
        ax2.plot(cs, a1["k"] * cs ** a1["a"], ":", label="Approach 1 fit")
    opt = result["optimum"]
    ax2.errorbar([opt["flops"]], [opt["params"]], yerr=[[opt["params"] - opt["params_interval"][0]],
                 [opt["params_interval"][1] - opt["params"]]], fmt="*", ms=10, label="optimum (5-95%)")  # fmt: skip
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("compute C (FLOPs)")
    ax2.set_ylabel("compute-optimal N")
    ax2.legend(fontsize=7)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def run_ladder(cfg: LadderConfig) -> dict[str, Any]:
    from llmpipe.tune.sweep import run_sweep

    assert cfg.out is not None
    summary = run_sweep(as_sweep(cfg))
    failed = [r["trial_id"] for r in summary["trials"] if r["status"] != "completed"]
    if failed:
        raise InputError(f"ladder runs did not complete: {failed} (see {cfg.out}/trials/*/train.log)")
    for row in summary["trials"]:
        row["ranks"] = cfg.nproc
    result = fit_ladder(
        run_points(summary["trials"], cfg.metric, cfg.min_step),
        cfg.flops,
        cfg.bootstrap,
        cfg.drop_outliers,
        cfg.outlier_z,
        cfg.seed,
    )
    out = cfg.out.resolve()
    (out / "fit.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(out / "scaling.png", result)
    return result
