"""Score documents with a trained quality classifier and keep the best.

Two model formats: ``llmpipe`` (written by ``llmpipe quality train``; the score is its probability
of good quality) and ``fasttext`` (a supervised fastText ``.bin``/``.ftz``, e.g. DCLM's; the score
is the probability of ``label``).

A global stage, because ``target_retention`` calibrates the threshold on the scores of the whole
run (a deterministic sample of at most ``sample_docs`` documents) so that the stage keeps that
fraction of the words it receives; without it the fixed ``threshold`` applies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.curate.executors import Executor
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalStage, RunContext, word_counts
from llmpipe.curate.workdir import read_parquet
from llmpipe.errors import ConfigError
from llmpipe.io.fs import not_a_file
from llmpipe.quality import FastTextModel

REASON = "low_quality_score"
#: the first bytes of a fastText model file (its magic number, int32 little-endian)
FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")


def calibrate(scores: np.ndarray, words: np.ndarray, target: float) -> float:
    """The threshold that keeps ``target`` of the words: best-scored documents first, ties together."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target_retention must be in (0, 1], not {target}")
    if len(scores) == 0:
        return 0.0
    order = np.argsort(-scores, kind="stable")
    cum = np.cumsum(words[order])
    goal = target * cum[-1]
    k = int(np.searchsorted(cum, goal, side="left"))
    k = min(k, len(order) - 1)
    # the k-th document brings the kept words to the goal; pick whichever side lands closer
    if k > 0 and abs(cum[k - 1] - goal) < abs(cum[k] - goal):
        k -= 1
    return float(scores[order[k]])


class QualityModelFilter(GlobalStage):
    name: ClassVar[str] = "quality_model"

    @dataclass
    class Config:
        enabled: bool = False
        #: model file: written by `llmpipe quality train` (format llmpipe) or a fastText classifier
        model: str | None = None
        #: "llmpipe" or "fasttext"
        format: str = "llmpipe"
        #: fastText only: the label whose probability is the score (e.g. ``__label__hq``)
        label: str | None = None
        #: keep documents whose score is >= threshold (ignored when target_retention is set)
        threshold: float = 0.5
        #: keep this fraction of words, calibrated per run (e.g. 0.02): of the run's input words
        #: (``target_of: input``, the funnel's first stage: raw HTML words for WARC) or of the words
        #: entering this stage (``target_of: stage``)
        target_retention: float | None = None
        target_of: str = "input"
        #: calibration sample size (documents, chosen by a hash of their id), at least 1
        sample_docs: int = 200_000

        def __post_init__(self) -> None:
            if self.sample_docs < 1:
                raise ValueError(f"sample_docs must be at least 1, not {self.sample_docs}")
            if not math.isfinite(self.threshold):  # nan keeps every document, inf none
                raise ValueError(f"threshold must be a finite number, not {self.threshold}")

    def __init__(self, cfg: Config, options: dict[str, str] | None = None) -> None:
        if not cfg.model:
            raise ValueError("quality_model.model: the path of a model trained by `llmpipe quality train`")
        if why := not_a_file(cfg.model):
            raise ValueError(f"quality_model.model: {cfg.model} {why}")
        if cfg.target_retention is not None and not 0.0 < cfg.target_retention <= 1.0:
            raise ValueError(f"target_retention must be in (0, 1], not {cfg.target_retention}")
        if cfg.format not in ("llmpipe", "fasttext"):
            raise ValueError(f"format must be 'llmpipe' or 'fasttext', not {cfg.format!r}")
        if cfg.format == "fasttext" and not cfg.label:
            raise ValueError("label: the fastText label to score (e.g. __label__hq), format: fasttext")
        if cfg.format == "llmpipe" and cfg.label:
            raise ValueError("label is only read with format: fasttext")
        if cfg.target_of not in ("input", "stage"):
            raise ValueError(f"target_of must be 'input' or 'stage', not {cfg.target_of!r}")
        self.cfg = cfg
        #: how the errors of loading the model name the options: the config's keys, or (``quality
        #: calibrate``, which scores with this stage) the command's
        self.options = options or {"format": "format: fasttext", "label": "quality_model.label"}

    @classmethod
    def from_config(cls, cfg: Config) -> QualityModelFilter | None:
        return cls(cfg) if cfg.enabled else None

    @cached_property
    def model(self) -> Any:
        if self.cfg.format == "fasttext":
            m = FastTextModel.load(str(self.cfg.model))
            if self.cfg.label not in m.labels:
                raise ConfigError(
                    f"{self.options['label']}: {self.cfg.label!r} is not a label of {self.cfg.model}: {m.labels}"
                )
            return m
        try:
            return _core.QualityModel.load(str(self.cfg.model))
        except ConfigError as e:
            with open(str(self.cfg.model), "rb") as f:
                if f.read(4) != FASTTEXT_MAGIC:
                    raise
            raise ConfigError(
                f"{e}: it is a fastText model; score with it by {self.options['format']} and the label to "
                "score (e.g. __label__hq)"
            ) from None

    def score(self, texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The score of each text: probability of good quality / of the configured fastText label."""
        if self.cfg.format == "llmpipe":
            return np.asarray(self.model.score(string_buffers(texts)), dtype=np.float64)
        want = self.model.labels.index(self.cfg.label)
        ids, probs = self.model.predict_ids(texts, k=-1)
        out = np.zeros(len(ids), dtype=np.float64)
        for j, (i, p) in enumerate(zip(ids, probs, strict=True)):
            if want in i:
                out[j] = p[i.index(want)]
        return out

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        scores = self.score(batch.column("text"))
        return pa.table(
            {
                "id": batch.column("id"),
                "score": pa.array(scores, pa.float64()),
                "words": pa.array(word_counts(batch), pa.int64()),
            }
        )

    def stage_fraction(self, stage_words: int, run_words: int) -> float:
        """``target_retention`` as a fraction of the words entering this stage (the run read ``run_words``)."""
        target = float(self.cfg.target_retention or 1.0)
        if self.cfg.target_of == "stage" or not run_words or stage_words <= 0:
            return target
        return min(1.0, target * run_words / stage_words)

    def threshold_for(self, keys: pa.Table, run_words: int) -> float:
        if self.cfg.target_retention is None:
            return self.cfg.threshold
        fraction = self.stage_fraction(int(pc.sum(keys["words"]).as_py() or 0), run_words)
        if fraction >= 1.0:
            return float("-inf")  # the stage gets no more than the target: keep everything
        if keys.num_rows > self.cfg.sample_docs:
            h = np.frombuffer(_core.content_hashes(keys["id"].to_pylist()), dtype="<u8")[::2]
            keys = keys.take(np.argsort(h, kind="stable")[: self.cfg.sample_docs])
        scores = keys["score"].to_numpy()
        return calibrate(scores, keys["words"].to_numpy(), fraction)

    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        tables = [read_parquet(f) for f in key_files]
        if not tables:
            return DROPS_SCHEMA.empty_table()
        keys = pa.concat_tables(tables)
        thr = self.threshold_for(keys, run.input_words)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "threshold.json").write_text(
            json.dumps({"threshold": thr, "target_retention": self.cfg.target_retention})
        )
        drops = keys.filter(pc.less(keys["score"], thr)).sort_by("id")
        return pa.table(
            {
                "id": drops["id"],
                "reason": pa.array([REASON] * drops.num_rows, pa.string()),
                "dup_of": pa.nulls(drops.num_rows, pa.string()),
            },
            schema=DROPS_SCHEMA,
        )
