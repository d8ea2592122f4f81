"""Semantic dedup (SemDeDup): drop documents whose meaning another document already carries.

    prepare (per batch)        -> keys: id, text, words, score (a classifier's, NaN without one)
    embed   (per key file)     -> normalised embeddings of a local HF encoder (mean or CLS pooling),
                                  cached by content under the run's cache: a re-run or a threshold
                                  sweep reads them back (``hf_models``); Ray actors on a cluster
    k-means (driver)           -> scikit-learn KMeans, seeded, on the embeddings in key-file order
                                  (a NaN or infinite one is in no cluster: ``non_finite_embedding``)
    edges   (per cluster run)  -> pairs of one cluster whose cosine similarity is >= threshold
    groups  (driver)           -> union-find over the pairs; one document kept per group: the highest
                                  classifier score when a classifier ran (ties: smallest id), else the
                                  smallest id, as near dedup keeps

scikit-learn, not faiss: it is already a locked dependency (of datatrove, our peer in the tests),
its seeded Lloyd k-means is deterministic for a fixed input order, and the clustering is a small
part of the cost next to the encoder; faiss-cpu would add a native wheel for speed we do not need.
Pairs in different clusters are not compared (the approximation SemDeDup makes); ``clusters: 1``
compares all pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llmpipe import _core
from llmpipe.curate.executors import Executor, executor_workers, map_with
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalStage, RunContext, word_counts
from llmpipe.curate.stages import hf_models
from llmpipe.curate.stages.classifier import SCORE_FIELD_KEY
from llmpipe.curate.workdir import write_table_atomic
from llmpipe.errors import ConfigError

REASON = "semantic_duplicate"
#: the drop reason of a document whose embedding is NaN or infinite (it cannot be compared)
NON_FINITE = "non_finite_embedding"
EDGE_SCHEMA = pa.schema([("a", pa.uint32()), ("b", pa.uint32())])
BLOCK = 2048  # rows of one similarity block


def cluster_edges(
    emb_files: Sequence[str], labels_file: str, clusters: Sequence[int], threshold: float, out: str
) -> str:
    """Pairs (global document indices, a < b) of the given clusters with cosine >= ``threshold``."""
    if Path(out).exists():
        return out
    emb = np.concatenate([hf_models.read_result(Path(f)) for f in emb_files])
    labels = np.load(labels_file, allow_pickle=False)
    a_parts, b_parts = [], []
    for c in clusters:
        members = np.flatnonzero(labels == c)
        e = emb[members]
        for r0 in range(0, len(members), BLOCK):
            sims = e[r0 : r0 + BLOCK] @ e[r0:].T
            ii, jj = np.nonzero(sims >= threshold)
            jj = jj + r0
            upper = jj > ii + r0
            a_parts.append(members[ii[upper] + r0])
            b_parts.append(members[jj[upper]])
    a = np.concatenate(a_parts).astype(np.uint32) if a_parts else np.zeros(0, np.uint32)
    b = np.concatenate(b_parts).astype(np.uint32) if b_parts else np.zeros(0, np.uint32)
    write_table_atomic(Path(out), pa.table({"a": a, "b": b}, schema=EDGE_SCHEMA))
    return out


def distinct_rows(points: np.ndarray, at_most: int) -> int:
    """How many distinct rows ``points`` has, up to ``at_most`` (the first rows usually show enough)."""
    if len(np.unique(points[: 4 * at_most], axis=0)) >= at_most:
        return at_most
    return min(len(np.unique(points, axis=0)), at_most)


class SemanticDedup(GlobalStage):
    """Drops documents an encoder puts within ``threshold`` cosine of a kept one (``semantic_duplicate``)."""

    name: ClassVar[str] = "semantic_dedup"

    @dataclass
    class Config:
        enabled: bool = False
        #: a local Hugging Face encoder directory (AutoModel, safetensors) with its tokenizer
        model: str | None = None
        #: cosine similarity at or above which two documents are duplicates
        threshold: float = 0.95
        #: k-means clusters (pairs are compared within a cluster; at most one per document)
        clusters: int = 100
        #: "mean" (over the tokens) or "cls" (the first token's state)
        pooling: str = "mean"
        seed: int = 0
        max_length: int | None = None
        batch_size: int = 32
        #: "auto" keeps the document with the highest classifier score when a classifier ran, else the
        #: smallest id; "smallest_id" always the smallest id
        keep: str = "auto"
        #: on Ray: CPUs and GPUs of one encoder actor, and how many actors (0: as many as fit)
        num_cpus: float = 1.0
        num_gpus: float = 0.0
        actors: int = 0

    def __init__(self, cfg: Config) -> None:
        if not -1.0 <= cfg.threshold <= 1.0:
            raise ValueError(f"threshold is a cosine similarity in [-1, 1], not {cfg.threshold}")
        if cfg.clusters < 1 or cfg.batch_size < 1:
            raise ValueError("clusters and batch_size must be at least 1")
        if cfg.max_length is not None and cfg.max_length < 2:
            raise ValueError(f"max_length must be >= 2 (the tokens kept of a document), not {cfg.max_length}")
        hf_models.check_resources(cfg.num_cpus, cfg.num_gpus, cfg.actors)
        if cfg.pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', not {cfg.pooling!r}")
        if cfg.keep not in ("auto", "smallest_id"):
            raise ValueError(f"keep must be 'auto' or 'smallest_id', not {cfg.keep!r}")
        hf_models.need_extra("semantic_dedup")
        try:
            import sklearn  # noqa: F401
        except ModuleNotFoundError:
            raise ValueError(
                f"semantic_dedup needs the '{hf_models.EXTRA}' extra (sklearn is not installed): "
                f"pip install 'llmpipe[{hf_models.EXTRA}]'"
            ) from None
        self.cfg = cfg
        path = hf_models.check_dir(cfg.model, "semantic_dedup")
        self.spec = hf_models.ModelSpec(path, "encoder", cfg.max_length, cfg.batch_size, cfg.pooling)
        hf_models.Checked(self.spec)

    @classmethod
    def from_config(cls, cfg: Config) -> SemanticDedup | None:
        return cls(cfg) if cfg.enabled else None

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        score = next((f.name for f in batch.schema if f.metadata and SCORE_FIELD_KEY in f.metadata), None)
        col = (
            batch.column(score).cast(pa.float64())
            if score is not None and self.cfg.keep == "auto"
            else pa.array(np.full(batch.num_rows, np.nan))
        )
        return pa.table(
            {
                "id": batch.column("id"),
                "text": batch.column("text"),
                "words": pa.array(word_counts(batch), pa.int64()),
                "score": col,
            }
        )

    def embeddings(self, key_files: Sequence[Path], run: RunContext, executor: Executor | None) -> list[str]:
        """The cached embedding file of each key file (computed now where missing)."""
        assert run.cache is not None
        if not self.spec.digest:
            self.spec = replace(self.spec, digest=hf_models.digest(self.spec.path))
        res = hf_models.Resources(self.cfg.num_cpus, self.cfg.num_gpus, self.cfg.actors)
        args = [(self.spec, f, run.cache / "embeddings") for f in key_files]
        return [
            str(p)
            for p in hf_models.run_on_models(
                executor, hf_models.run_model_file, args, "semantic_dedup embed", res
            )
        ]

    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        if not key_files:
            return DROPS_SCHEMA.empty_table()
        emb_files = self.embeddings(key_files, run, executor)
        emb = np.concatenate([hf_models.read_result(Path(f)) for f in emb_files])
        n = len(emb)
        finite = np.isfinite(emb).all(axis=1)
        if n and not finite.any():
            raise ConfigError(
                f"{self.spec.path}: the encoder gives no finite embedding (NaN or infinite for all {n} "
                "documents): are its weights finite?"
            )
        keys = pa.concat_tables([pq.read_table(f, columns=["id", "score"]) for f in key_files])
        # a document whose embedding is NaN or infinite cannot be compared: it goes with its own reason
        odd = keys.column("id").filter(pa.array(~finite))
        odd_drops = pa.table(
            {
                "id": odd,
                "reason": pa.array([NON_FINITE] * len(odd), pa.string()),
                "dup_of": pa.nulls(len(odd), pa.string()),
            },
            schema=DROPS_SCHEMA,
        )
        m = int(finite.sum())
        if m < 2:
            return odd_drops.sort_by("id")
        points = emb if m == n else emb[finite]
        # no more clusters than distinct points: k-means would leave the others empty and warn
        k = distinct_rows(points, min(self.cfg.clusters, m))
        labels = np.full(n, -1, dtype=np.int64)  # -1: in no cluster
        labels[finite] = self.kmeans(points, k)
        del points
        workdir.mkdir(parents=True, exist_ok=True)
        del emb
        labels_file = workdir / "labels.npy"
        np.save(labels_file, labels, allow_pickle=False)
        tasks = max(1, min(k, executor_workers(executor)))
        edge_files = map_with(
            executor,
            cluster_edges,
            [
                (
                    emb_files,
                    str(labels_file),
                    list(range(t, k, tasks)),
                    self.cfg.threshold,
                    str(workdir / f"edges{t:05d}.parquet"),
                )
                for t in range(tasks)
            ],
            "semantic_dedup edges",
        )
        uf = _core.UnionFind(n)
        for e in edge_files:
            t = pq.read_table(e)
            uf.union_edges(
                t.column("a").combine_chunks().to_numpy(), t.column("b").combine_chunks().to_numpy()
            )
        roots = np.frombuffer(uf.roots(), np.uint32)
        return pa.concat_tables([self.drops(keys, roots), odd_drops]).sort_by("id")

    def kmeans(self, emb: np.ndarray, k: int) -> np.ndarray:
        if k == 1:
            return np.zeros(len(emb), dtype=np.int64)
        from sklearn.cluster import KMeans

        km = KMeans(n_clusters=k, random_state=self.cfg.seed, n_init=1, init="k-means++")
        return km.fit_predict(emb.astype(np.float64)).astype(np.int64)

    @staticmethod
    def drops(keys: pa.Table, roots: np.ndarray) -> pa.Table:
        """All but one document of each group: the best score (NaN: none), then the smallest id."""
        n = len(roots)
        grouped = roots != np.arange(n, dtype=np.uint32)
        grouped[roots[grouped]] = True
        sel = np.flatnonzero(grouped)
        if not len(sel):
            return DROPS_SCHEMA.empty_table()
        score = keys.column("score").to_numpy(zero_copy_only=False)[sel]
        members = pa.table(
            {
                "id": keys.column("id").take(pa.array(sel)),
                "root": pa.array(roots[sel]),
                "score": pa.array(np.where(np.isnan(score), -np.inf, score)),
            }
        )
        ranked = members.sort_by([("root", "ascending"), ("score", "descending"), ("id", "ascending")])
        root = ranked.column("root").to_numpy()
        first = np.ones(len(root), dtype=bool)
        first[1:] = root[1:] != root[:-1]
        keeper = pa.table(
            {
                "root": ranked.column("root").filter(pa.array(first)),
                "keep": ranked.column("id").filter(pa.array(first)),
            }
        )
        joined = ranked.filter(pa.array(~first)).join(keeper, "root")
        drops = joined.sort_by("id")
        return pa.table(
            {
                "id": drops["id"],
                "reason": pa.array([REASON] * drops.num_rows, pa.string()),
                "dup_of": drops["keep"],
            },
            schema=DROPS_SCHEMA,
        )
