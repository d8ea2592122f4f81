"""Near-duplicate removal, all in this package: the stage and its configuration (``stage``), and the
disk phases it resolves with (``phases``: shuffle, groups, verified edges, union-find, drops)."""

from llmpipe.curate.stages.near_dedup.stage import NearDedup

__all__ = ["NearDedup"]
