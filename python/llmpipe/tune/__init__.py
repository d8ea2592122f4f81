"""Hyperparameter sweeps on Ray Tune, model ladders and Chinchilla scaling-law fits (docs/scaling-laws.md)."""
