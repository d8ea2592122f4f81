"""The scaling-law fit as a Python API: ``fit_chinchilla(params, tokens, losses)`` -> E, A, B, alpha, beta (and
the points flagged as outliers).

See llmpipe/tune/scaling.py for the method (Chinchilla Approach 3, Huber loss on log-loss residuals,
L-BFGS from a grid of initialisations) and Approach 1 (``isoflop_minima``).
"""

from llmpipe.tune.scaling import (
    ChinchillaFit,
    EnvelopeFit,
    Optimum,
    compute_optimal,
    fit_chinchilla,
    flag_outliers,
    isoflop_minima,
    load_fit,
)

__all__ = [
    "ChinchillaFit",
    "EnvelopeFit",
    "Optimum",
    "compute_optimal",
    "fit_chinchilla",
    "flag_outliers",
    "isoflop_minima",
    "load_fit",
]
