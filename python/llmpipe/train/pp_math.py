"""Pipeline-parallel arithmetic, written once for the trainer (parallel.py, pipeline.py) and for
``llmpipe plan``: stages per rank, micro-batches, which blocks each stage holds, and the bubble.

No torch here: ``llmpipe plan --params N`` uses it without building (or importing) a model.
"""

from __future__ import annotations

INTERLEAVED = "interleaved_1f1b"


def stages_per_rank(schedule: str, requested: int = 0) -> int:
    """``requested``, or the default: 2 for the interleaved schedule (looped stages), else 1."""
    return requested or (2 if schedule == INTERLEAVED else 1)


def n_microbatches(pp: int, per_rank: int, requested: int = 0) -> int:
    """``requested``, or one per stage: pp x stages per rank."""
    return requested or pp * per_rank


def split_layers(n_layers: int, n_stages: int) -> list[list[int]]:
    """Blocks per stage, as even as possible, earlier stages one more."""
    base, extra = divmod(n_layers, n_stages)
    out, start = [], 0
    for s in range(n_stages):
        k = base + (1 if s < extra else 0)
        out.append(list(range(start, start + k)))
        start += k
    return out


def layers_per_stage(n_layers: int, n_stages: int) -> int:
    """The blocks of the largest stage of ``split_layers`` (the first)."""
    return max((len(s) for s in split_layers(n_layers, n_stages)), default=0)


def stage_ids(pp: int, pp_rank: int, per_rank: int) -> list[int]:
    """Stage indices on a pp rank: ``r`` (one per rank) or ``r, r + pp, ...`` (looped, interleaved)."""
    return [pp_rank + v * pp for v in range(per_rank)]


def bubble_fraction(pp: int, schedule: str, microbatches: int, per_rank: int) -> float:
    """Idle share of a pipeline step: (pp - 1) / (m + pp - 1) for GPipe and 1F1B, with m micro-batches;
    interleaving v stages per rank makes each bubble v times shorter: (pp - 1) / (v m + pp - 1)."""
    if pp == 1:
        return 0.0
    v = per_rank if schedule == INTERLEAVED else 1
    return (pp - 1) / (v * microbatches + pp - 1)
