"""Near-duplicate removal: MinHash LSH over word shingles, clusters keep their smallest id.

The phases (prepare per batch, then shuffle -> groups -> edges -> union-find -> drops) live in
``phases`` beside this module; this class holds the configuration. See docs/dedup.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import pyarrow as pa

from llmpipe.curate.executors import Executor
from llmpipe.curate.stage import GlobalStage, RunContext
from llmpipe.curate.stages.near_dedup import phases
from llmpipe.dedup import DEFAULT_VERIFY_THRESHOLD, Shingling, lsh_shape
from llmpipe.errors import ConfigError


class NearDedup(GlobalStage):
    """Drops near duplicates (reason ``near_duplicate``); each records the id it duplicates."""

    name: ClassVar[str] = "near_dedup"
    ignores_dropped: ClassVar[bool] = True

    @dataclass
    class Config:
        enabled: bool = True
        #: shingle unit and n-gram size (FineWeb: word 5-grams)
        unit: Literal["words", "chars"] = "words"
        ngram: int = 5
        #: MinHash hashes and LSH bands x rows (FineWeb: 112 = 14 x 8)
        num_perm: int = 112
        bands: int = 14
        rows: int = 8
        #: if set: bands x rows minimising weighted FP/FN at this Jaccard, and the verify threshold
        threshold: float | None = None
        seed: int = 1
        lowercase: bool = True
        strip_punctuation: bool = True
        nfc: bool = True
        #: verify candidate pairs by exact Jaccard of their shingle sets before merging
        verify: bool = True
        #: exact-Jaccard threshold of verification (default: ``threshold``, else 0.7)
        verify_threshold: float | None = None
        #: target size of one shuffle partition of band rows (20 bytes per document and band)
        partition_mb: float = 256.0

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        try:
            self.bands, self.rows = lsh_shape(cfg.num_perm, cfg.bands, cfg.rows, cfg.threshold)
        except ConfigError as e:
            raise ValueError(str(e)) from e
        if cfg.ngram < 1 or cfg.num_perm < 1 or cfg.partition_mb <= 0:
            raise ValueError("ngram and num_perm must be at least 1, partition_mb positive")
        vt = cfg.verify_threshold if cfg.verify_threshold is not None else cfg.threshold
        self.verify_threshold = (DEFAULT_VERIFY_THRESHOLD if vt is None else vt) if cfg.verify else None
        if self.verify_threshold is not None and not 0.0 <= self.verify_threshold <= 1.0:
            raise ValueError(f"verify_threshold must be in [0, 1], got {self.verify_threshold}")
        self.shingling = Shingling(
            cfg.num_perm, cfg.ngram, cfg.seed, cfg.unit, cfg.lowercase, cfg.strip_punctuation, cfg.nfc
        )

    @classmethod
    def from_config(cls, cfg: Config) -> NearDedup | None:
        return cls(cfg) if cfg.enabled else None

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        return phases.key_table(
            batch, self.shingling, self.bands, self.rows, keep_shingles=self.verify_threshold is not None
        )

    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        return phases.resolve(
            key_files,
            workdir,
            self.verify_threshold,
            int(self.cfg.partition_mb * 1024 * 1024),
            executor,
            run.dropped,
        )
