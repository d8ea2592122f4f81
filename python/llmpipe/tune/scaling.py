"""Chinchilla scaling-law fits: Approach 3 (parametric) and Approach 1 (the minimum-loss envelope).

Approach 3 fits L(N, D) = E + A / N^alpha + B / D^beta to (parameters, tokens, loss) points by
minimising the Huber loss (delta 1e-3) of the log-loss residuals
``LSE(a - alpha log N, b - beta log D, e) - log L`` with a = log A, b = log B, e = log E, by L-BFGS from
the best points of a grid of initialisations (Hoffmann et al. 2022, appendix D.2). Under a budget of
C = 6 N D FLOPs the fitted law has its minimum at

    N_opt(C) = G (C / 6)^(beta / (alpha + beta)),   D_opt(C) = (C / 6) / N_opt,
    G = (alpha A / (beta B))^(1 / (alpha + beta)).

Approach 1 reads IsoFLOP profiles off the training curves of several model sizes (``isoflop_minima``):
at each FLOP count, the loss of every size, a parabola in log N, its minimum; then N_opt = k C^a. Uncertainty of the
optimum and of the five constants comes from refitting Approach 3 on bootstrap resamples of the points.

Outliers: after the fit, a point is flagged when its log-loss residual lies more than k = ``outlier_z`` (3.5)
robust standard deviations from the median residual (the modified z-score of Iglewicz and Hoaglin:
0.6745 (r - median) / MAD > k) and more than 1e-3 (0.1% of the loss) from it. Flagged points are reported; with
``drop_outliers=True`` they are left out and the fit repeated until the flagged set no longer changes (at
most five rounds), as Epoch AI's replication dropped the highest-loss points of Chinchilla's data by hand.
Flagging is the default and dropping an option: the Huber loss already bounds what a few wild points can
pull, while dropping by rule also removes real points where the law itself does not hold (the smallest
models, the shortest runs), which would hide the misfit and narrow the bootstrap intervals.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from llmpipe.errors import InputError

HUBER_DELTA = 1e-3
# the grid of initialisations: alpha, beta, e = log E, a = log A, b = log B
INIT_GRID = {
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
}
STARTS = 16  # L-BFGS runs from the best grid points
OUTLIER_Z = 3.5  # modified z-score above which a point's residual is flagged
OUTLIER_FLOOR = 1e-3  # ... and only when it is also this far (in log loss) from the median residual
CONSTANTS = ("E", "A", "B", "alpha", "beta")


@dataclass
class ChinchillaFit:
    """L(N, D) = E + A / N^alpha + B / D^beta."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float = 0.0  # the Huber loss at the optimum (mean over the fitted points)
    points: int = 0  # points given
    outliers: list[int] = field(default_factory=list)  # indices of the points flagged as outliers
    dropped: bool = False  # the flagged points were left out of the fit
    outlier_z: float = 0.0  # the flagging rule's k (modified z-score limit); 0 for a fit that was not flagged

    def loss(self, params: ArrayLike, tokens: ArrayLike) -> NDArray[np.float64]:
        n, d = np.asarray(params, dtype=float), np.asarray(tokens, dtype=float)
        return np.asarray(self.E + self.A / n**self.alpha + self.B / d**self.beta, dtype=float)

    def optimal_params(self, flops: float) -> float:
        a, b = self.alpha, self.beta
        g = (a * self.A / (b * self.B)) ** (1.0 / (a + b))
        return float(g * (flops / 6.0) ** (b / (a + b)))

    def optimal(self, flops: float) -> tuple[float, float]:
        """Compute-optimal (parameters, tokens) for ``flops`` = 6 N D."""
        n = self.optimal_params(flops)
        return n, flops / 6.0 / n

    def optimal_tokens(self, params: float) -> float:
        """The tokens D for which a model of ``params`` parameters is compute-optimal (N_opt(6 N D) = N)."""
        a, b = self.alpha, self.beta
        g = (a * self.A / (b * self.B)) ** (1.0 / (a + b))
        return float((params / g) ** ((a + b) / b) / params)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_fit(path: str | Path) -> ChinchillaFit:
    """Approach 3 from a ``llmpipe scaling`` fit.json (or a file holding the five constants alone)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such scaling fit (written by `llmpipe scaling` as OUT/fit.json)")
    try:
        data = json.loads(p.read_text())
        data = data.get("approach3", data)
        e, a, b, alpha, beta = (float(data[k]) for k in ("E", "A", "B", "alpha", "beta"))
        fit = ChinchillaFit(E=e, A=a, B=b, alpha=alpha, beta=beta)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{p}: not a scaling fit (need E, A, B, alpha, beta): {e}") from e
    if fit.alpha <= 0 or fit.beta <= 0 or fit.A <= 0 or fit.B <= 0:
        raise InputError(f"{p}: alpha, beta, A and B must be positive for an optimum to exist")
    return fit


def _arrays(params: ArrayLike, tokens: ArrayLike, losses: ArrayLike) -> tuple[NDArray[np.float64], ...]:
    n, d, loss = (np.asarray(x, dtype=float).ravel() for x in (params, tokens, losses))
    if not (len(n) == len(d) == len(loss)):
        raise InputError(f"params, tokens and losses differ in length ({len(n)}, {len(d)}, {len(loss)})")
    if len(n) < 5:
        raise InputError(f"{len(n)} points: the fit has 5 parameters and needs at least 5")
    if (n <= 0).any() or (d <= 0).any() or (loss <= 0).any() or not np.isfinite(loss).all():
        raise InputError("params, tokens and losses must be positive and finite")
    return n, d, loss


def _objective(
    x: NDArray[np.float64], log_n: NDArray[np.float64], log_d: NDArray[np.float64], log_l: NDArray[np.float64]
) -> tuple[float, NDArray[np.float64]]:
    """Mean Huber loss of the log residuals and its gradient in (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = x
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    top = terms.max(axis=0)
    w = np.exp(terms - top)
    s = w.sum(axis=0)
    lse = top + np.log(s)
    w /= s
    r = lse - log_l
    small = np.abs(r) <= HUBER_DELTA
    h = np.where(small, 0.5 * r**2, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA))
    dh = np.where(small, r, HUBER_DELTA * np.sign(r)) / len(r)
    grad = np.array(
        [
            (dh * w[0]).sum(),
            (dh * w[1]).sum(),
            (dh * w[2]).sum(),
            -(dh * w[0] * log_n).sum(),
            -(dh * w[1] * log_d).sum(),
        ]
    )
    return float(h.mean()), grad


def _grid_objective(
    log_n: NDArray[np.float64], log_d: NDArray[np.float64], log_l: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    g = np.array(list(itertools.product(*(INIT_GRID[k] for k in ("a", "b", "e", "alpha", "beta")))))
    a, b, e, alpha, beta = (g[:, i : i + 1] for i in range(5))
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.broadcast_to(e, (len(g), len(log_n)))])
    r = np.logaddexp.reduce(terms, axis=0) - log_l
    h = np.where(np.abs(r) <= HUBER_DELTA, 0.5 * r**2, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA))
    return g, h.mean(axis=1)


def flag_outliers(
    fit: ChinchillaFit, params: ArrayLike, tokens: ArrayLike, losses: ArrayLike, outlier_z: float = OUTLIER_Z
) -> list[int]:
    """Indices of the points whose log-loss residual under ``fit`` is an outlier: modified z-score above
    ``outlier_z`` and more than 1e-3 from the median residual (module docstring)."""
    if not outlier_z > 0:
        raise InputError(f"outlier_z {outlier_z}: the outlier limit must be positive")
    n, d, loss = (np.asarray(x, dtype=float).ravel() for x in (params, tokens, losses))
    r = np.log(loss) - np.log(fit.loss(n, d))
    dev = np.abs(r - np.median(r))
    limit = max(outlier_z * float(np.median(dev)) / 0.6745, OUTLIER_FLOOR)
    return [int(i) for i in np.flatnonzero(dev > limit)]


def _lbfgs(
    log_n: NDArray[np.float64],
    log_d: NDArray[np.float64],
    log_l: NDArray[np.float64],
    init: ChinchillaFit | None,
) -> ChinchillaFit:
    from scipy.optimize import minimize

    if init is None:
        grid, values = _grid_objective(log_n, log_d, log_l)
        starts = [grid[i] for i in np.argsort(values)[:STARTS]]
    else:
        starts = [np.log([init.A, init.B, init.E]).tolist() + [init.alpha, init.beta]]
    best: tuple[float, NDArray[np.float64]] | None = None
    for x0 in starts:
        res = minimize(
            _objective,
            np.asarray(x0, dtype=float),
            args=(log_n, log_d, log_l),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-12},
        )
        if best is None or res.fun < best[0]:
            best = (float(res.fun), res.x)
    assert best is not None
    a, b, e, alpha, beta = best[1]
    return ChinchillaFit(
        E=math.exp(e), A=math.exp(a), B=math.exp(b), alpha=float(alpha), beta=float(beta), objective=best[0]
    )


def fit_chinchilla(
    params: ArrayLike,
    tokens: ArrayLike,
    losses: ArrayLike,
    *,
    init: ChinchillaFit | None = None,
    drop_outliers: bool = False,
    outlier_z: float = OUTLIER_Z,
) -> ChinchillaFit:
    """Approach 3: fit E, A, B, alpha, beta to the points (see the module docstring). With ``init``,
    one L-BFGS run from that fit instead of the grid (the bootstrap refits). Outliers are always flagged
    (``fit.outliers``: modified z-score of the log-loss residual above ``outlier_z``); with
    ``drop_outliers`` they are left out of the fit."""
    n, d, loss = _arrays(params, tokens, losses)
    log_n, log_d, log_l = np.log(n), np.log(d), np.log(loss)
    fit = _lbfgs(log_n, log_d, log_l, init)
    flagged = flag_outliers(fit, n, d, loss, outlier_z)
    if drop_outliers and flagged:
        for _ in range(5):
            keep = np.setdiff1d(np.arange(len(n)), flagged)
            if len(keep) < 5:
                raise InputError(
                    f"{len(keep)} points are left after dropping {len(flagged)} outliers: too few"
                )
            fit = _lbfgs(log_n[keep], log_d[keep], log_l[keep], init)
            again = flag_outliers(fit, n, d, loss, outlier_z)
            if again == flagged:
                break
            flagged = again
        fit.dropped = True
    fit.outliers = flagged
    fit.outlier_z = outlier_z
    fit.points = len(n)
    return fit


@dataclass
class EnvelopeFit:
    """Approach 1: N_opt(C) = k C^a, D_opt(C) = C / (6 N_opt), through the IsoFLOP minima."""

    k: float
    a: float
    minima: list[dict[str, float]] = field(default_factory=list)  # per budget: flops, params, tokens, loss

    def optimal(self, flops: float) -> tuple[float, float]:
        n = self.k * flops**self.a
        return n, flops / 6.0 / n

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def isoflop_minima(params: ArrayLike, tokens: ArrayLike, losses: ArrayLike, budgets: int = 12) -> EnvelopeFit:
    """Approach 1 from training curves: the points of each model size (one N, several D: its evaluations
    along training) are its loss curve. At ``budgets`` log-spaced FLOP counts C reached by at least three
    sizes, each size's loss at D = C / 6N is read off its curve (linear in log D); a parabola in log N
    through those losses gives the IsoFLOP minimum N_opt(C) (the best size itself when the parabola does
    not open upwards or its vertex leaves the sizes' range). N_opt = k C^a is then fitted in log-log."""
    n, d, loss = _arrays(params, tokens, losses)
    curves = []
    for size in np.unique(n):
        sel = n == size
        order = np.argsort(d[sel])
        curves.append((float(size), np.log(d[sel][order]), loss[sel][order]))
    if len(curves) < 3:
        raise InputError(f"{len(curves)} model sizes: IsoFLOP minima need at least three")
    lo = [math.log(6 * s) + ld[0] for s, ld, _ in curves]
    hi = [math.log(6 * s) + ld[-1] for s, ld, _ in curves]
    third_lo, third_hi = sorted(lo)[2], sorted(hi)[-3]  # the range of C that three sizes reach
    if third_hi <= third_lo:
        raise InputError("no FLOP count is reached by three model sizes: train the ladder longer")
    minima = []
    for log_c in np.linspace(third_lo, third_hi, budgets):
        xs, ys = [], []
        for s, ld, ls in curves:
            x = log_c - math.log(6 * s)
            if ld[0] <= x <= ld[-1]:
                xs.append(math.log(s))
                ys.append(float(np.interp(x, ld, ls)))
        if len(xs) < 3:
            continue
        x_arr, y_arr = np.array(xs), np.array(ys)
        c2, c1, c0 = np.polyfit(x_arr, y_arr, 2)
        vertex = -c1 / (2 * c2) if c2 > 0 else math.nan
        if c2 > 0 and x_arr.min() <= vertex <= x_arr.max():
            log_n, best = vertex, c0 + c1 * vertex + c2 * vertex**2
        else:
            j = int(np.argmin(y_arr))
            log_n, best = float(x_arr[j]), float(y_arr[j])
        c = math.exp(log_c)
        n_opt = math.exp(log_n)
        minima.append({"flops": c, "params": n_opt, "tokens": c / 6 / n_opt, "loss": float(best)})
    if len(minima) < 2:
        raise InputError("fewer than two IsoFLOP budgets are reached by three model sizes")
    lc = np.log([m["flops"] for m in minima])
    ln = np.log([m["params"] for m in minima])
    slope, icpt = np.polyfit(lc, ln, 1)
    return EnvelopeFit(k=float(math.exp(icpt)), a=float(slope), minima=minima)


@dataclass
class Optimum:
    """The compute-optimal allocation of a FLOP budget, with bootstrap percentiles (5th, 95th)."""

    flops: float
    params: float
    tokens: float
    tokens_per_param: float
    params_interval: tuple[float, float]
    tokens_interval: tuple[float, float]
    ratio_interval: tuple[float, float]
    bootstrap: int
    #: 5th and 95th percentiles of E, A, B, alpha and beta over the same bootstrap refits
    constant_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compute_optimal(
    fit: ChinchillaFit,
    params: ArrayLike,
    tokens: ArrayLike,
    losses: ArrayLike,
    flops: float,
    *,
    bootstrap: int = 50,
    seed: int = 0,
) -> Optimum:
    """N_opt, D_opt and D/N for ``flops`` from ``fit``; intervals from Approach 3 refitted (L-BFGS from
    ``fit``) on ``bootstrap`` resamples (with replacement) of the points (of the points kept, when the fit
    dropped its outliers)."""
    n, d, loss = _arrays(params, tokens, losses)
    if fit.dropped and fit.outliers:
        keep = np.setdiff1d(np.arange(len(n)), fit.outliers)
        n, d, loss = n[keep], d[keep], loss[keep]
    n_opt, d_opt = fit.optimal(flops)
    rng = np.random.default_rng(seed)
    ns, ds = [], []
    consts: list[list[float]] = []
    for _ in range(bootstrap):
        i = rng.integers(0, len(n), len(n))
        if len(np.unique(n[i])) < 2 or len(np.unique(d[i])) < 2:
            continue
        f = fit_chinchilla(n[i], d[i], loss[i], init=fit, outlier_z=fit.outlier_z or OUTLIER_Z)
        if f.alpha <= 0 or f.beta <= 0:
            continue
        bn, bd = f.optimal(flops)
        ns.append(bn)
        ds.append(bd)
        consts.append([getattr(f, k) for k in CONSTANTS])
    if ns:
        na, da = np.array(ns), np.array(ds)
        pn = tuple(float(v) for v in np.percentile(na, [5, 95]))
        pd = tuple(float(v) for v in np.percentile(da, [5, 95]))
        pr = tuple(float(v) for v in np.percentile(da / na, [5, 95]))
        pc = np.percentile(np.array(consts), [5, 95], axis=0)
        intervals = {k: (float(pc[0, j]), float(pc[1, j])) for j, k in enumerate(CONSTANTS)}
    else:
        pn, pd, pr = (n_opt, n_opt), (d_opt, d_opt), (d_opt / n_opt, d_opt / n_opt)
        intervals = {k: (getattr(fit, k), getattr(fit, k)) for k in CONSTANTS}
    return Optimum(
        flops=flops,
        params=n_opt,
        tokens=d_opt,
        tokens_per_param=d_opt / n_opt,
        params_interval=pn,  # type: ignore[arg-type]
        tokens_interval=pd,  # type: ignore[arg-type]
        ratio_interval=pr,  # type: ignore[arg-type]
        bootstrap=len(ns),
        constant_intervals=intervals,
    )
