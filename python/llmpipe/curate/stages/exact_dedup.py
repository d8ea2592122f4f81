"""Exact deduplication: 128-bit hash of the normalised text, global over every input of the run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmpipe import _core
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalStage


class ExactDedup(GlobalStage):
    """Keeps, of every group of identical (normalised) texts, the document with the smallest id."""

    name: ClassVar[str] = "exact_dedup"

    @dataclass
    class Config:
        enabled: bool = True
        lowercase: bool = True
        collapse_whitespace: bool = True
        seed: int = 0

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: Config) -> ExactDedup | None:
        return cls(cfg) if cfg.enabled else None

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        texts = batch.column("text").to_pylist()
        raw = _core.content_hashes(
            texts,
            seed=self.cfg.seed,
            lowercase=self.cfg.lowercase,
            collapse_whitespace=self.cfg.collapse_whitespace,
        )
        hashes = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(texts), [None, pa.py_buffer(raw)])
        return pa.table({"id": batch.column("id"), "hash": hashes})

    def resolve(self, key_files: Sequence[Path], workdir: Path) -> pa.Table:
        tables = [pq.read_table(f) for f in key_files]
        if not tables:
            return DROPS_SCHEMA.empty_table()
        keys = pa.concat_tables(tables)
        keep = keys.group_by("hash").aggregate([("id", "min"), ("id", "count")])
        keep = keep.filter(pc.greater(keep["id_count"], 1)).select(["hash", "id_min"])
        joined = keys.join(keep, "hash", join_type="inner")
        drops = joined.filter(pc.not_equal(joined["id"], joined["id_min"]))
        drops = drops.sort_by("id")
        return pa.table(
            {
                "id": drops["id"],
                "reason": pa.array(["exact_duplicate"] * drops.num_rows, pa.string()),
                "dup_of": drops["id_min"],
            },
            schema=DROPS_SCHEMA,
        )
