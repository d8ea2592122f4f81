"""A sweep's search space: trainer keys (``section.key``) mapped to a sampling rule, as Ray Tune domains.

    space:
      optim.lr: {loguniform: [1.0e-4, 1.0e-2]}
      optim.weight_decay: {grid: [0.0, 0.1]}
      data.batch_size: {choice: [4, 8]}
      optim.warmup_steps: {randint: [0, 20]}        # both ends included
      optim.beta2: {uniform: [0.9, 0.99]}
      model: {grid: [{dim: 32, n_layers: 1}, {dim: 64, n_layers: 2}]}   # a section: several keys at once

A rule is one of grid (every value, in order; grid and random search only), choice, uniform, loguniform,
randint. A key without a dot names a trainer section and its values are mappings of that section's keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from llmpipe.errors import ConfigError

Kind = Literal["grid", "choice", "uniform", "loguniform", "randint"]
KINDS: tuple[str, ...] = ("grid", "choice", "uniform", "loguniform", "randint")


@dataclass(frozen=True)
class Param:
    key: str  # "section.key", or "section" for a mapping of several keys
    kind: Kind
    values: tuple[Any, ...]  # grid/choice: the values; uniform/loguniform/randint: (low, high)


def parse_space(raw: dict[str, Any]) -> list[Param]:
    if not raw:
        raise ConfigError("sweep: the search space is empty (give space: {section.key: {grid: [...]}})")
    out = []
    for key, rule in raw.items():
        where = f"space.{key}"
        if not isinstance(rule, dict) or len(rule) != 1:
            raise ConfigError(
                f"{where}: expected one rule, e.g. {{grid: [1, 2]}} (rules: {', '.join(KINDS)})"
            )
        ((kind, values),) = rule.items()
        if kind not in KINDS:
            raise ConfigError(f"{where}: unknown rule {kind!r} (rules: {', '.join(KINDS)})")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{kind}: expected a non-empty list")
        if "." not in key and not all(isinstance(v, dict) for v in values):
            raise ConfigError(f"{where}: a section ({key}) takes mappings of its keys as values")
        if kind in ("uniform", "loguniform", "randint"):
            if len(values) != 2 or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in values
            ):
                raise ConfigError(f"{where}.{kind}: expected [low, high]")
            lo, hi = values
            if not lo < hi or (kind == "loguniform" and lo <= 0):
                raise ConfigError(f"{where}.{kind}: need 0 < low < high for loguniform, low < high otherwise")
            if kind == "randint" and not (isinstance(lo, int) and isinstance(hi, int)):
                raise ConfigError(f"{where}.randint: bounds must be integers")
        out.append(Param(key, kind, tuple(values)))
    return out


def to_tune(params: list[Param], search: str) -> dict[str, Any]:
    """Ray Tune's param_space for ``params``. Section mappings are passed as JSON strings (hashable
    for every searcher) and decoded in the trial."""
    from ray import tune

    space: dict[str, Any] = {}
    for p in params:
        values = [json.dumps(v, sort_keys=True) if isinstance(v, dict) else v for v in p.values]
        if p.kind == "grid":
            if search == "tpe":
                raise ConfigError(f"space.{p.key}: grid needs search: grid or random (TPE samples)")
            space[p.key] = tune.grid_search(values)
        elif p.kind == "choice":
            space[p.key] = tune.choice(values)
        elif p.kind == "uniform":
            space[p.key] = tune.uniform(float(p.values[0]), float(p.values[1]))
        elif p.kind == "loguniform":
            space[p.key] = tune.loguniform(float(p.values[0]), float(p.values[1]))
        else:
            space[p.key] = tune.randint(int(p.values[0]), int(p.values[1]) + 1)
    return space


def overrides(config: dict[str, Any]) -> list[str]:
    """A trial's sampled values as trainer overrides ``section.key=value`` (values as YAML/JSON text)."""
    out = []
    for key, value in config.items():
        if isinstance(value, str) and "." not in key:
            value = json.loads(value)
        if isinstance(value, dict):
            out += [f"{key}.{k}={json.dumps(v)}" for k, v in value.items()]
        else:
            out.append(f"{key}={json.dumps(value)}")
    return out
