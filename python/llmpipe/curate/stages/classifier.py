"""Score documents with local Hugging Face sequence classifiers (FineWeb-Edu style) and keep the best.

The section ``classifier`` is one mapping or a list of them, one per model. Each model's score is the
probability of its ``label`` (softmax over the labels, or a sigmoid for a one-label or multi-label
model: what ``transformers.pipeline("text-classification")`` returns for that model), or with
``score: regression`` the raw output of a one-output head (FineWeb-Edu's 0-5 scale). A document is
kept when every model's score is >= its ``threshold``, or, with ``target_retention``, the threshold
calibrated on the run's scores as the n-gram ``quality_model`` does (each model on its own scores).

A global stage: ``prepare`` keeps the documents' ids, texts and words; ``resolve`` runs the models
over every key file through the executor (a pool of Ray actors on a cluster, each loading the model
once; the worker processes locally), results cached by content (``hf_models``), then calibrates and
lists the drops. The next segment adds each model's score as a column named ``name`` (float64) and
counts the scores in 20 bins (``counters`` of this stage in stats.json: ``<name> [lo,hi)``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmpipe.config import from_dict
from llmpipe.curate.executors import Executor
from llmpipe.curate.stage import DROPS_SCHEMA, GlobalStage, RunContext, StageCounts, word_counts
from llmpipe.curate.stages import hf_models
from llmpipe.curate.stages.quality_model import calibrate
from llmpipe.curate.workdir import write_table_atomic
from llmpipe.errors import ConfigError

#: the metadata key on a score column's Arrow field (``semantic_dedup`` keeps the best-scored document)
SCORE_FIELD_KEY = b"llmpipe.classifier"
BINS = 20


@dataclass
class ClassifierModelConfig:
    """One model of the section ``classifier``."""

    enabled: bool = True
    #: a local Hugging Face AutoModelForSequenceClassification directory (safetensors) with its tokenizer
    model: str | None = None
    #: the column the score is written to (also the name in stats.json and the drop reason)
    name: str = "classifier_score"
    #: the label whose probability is the score (a name of config.id2label, or its index)
    label: str | None = None
    #: "probability" (of ``label``) or "regression" (the raw output of a one-output head)
    score: str = "probability"
    #: keep documents whose score is >= threshold (ignored when target_retention is set)
    threshold: float = 0.5
    target_retention: float | None = None
    #: of the run's input words ("input") or of the words entering this stage ("stage")
    target_of: str = "input"
    sample_docs: int = 200_000
    #: tokens per document (default: the tokenizer's model_max_length, as the pipeline truncates)
    max_length: int | None = None
    batch_size: int = 32
    #: on Ray: CPUs and GPUs of one model actor, and how many actors (0: as many as fit)
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    actors: int = 0

    def __post_init__(self) -> None:
        if self.score not in ("probability", "regression"):
            raise ValueError(f"score must be 'probability' or 'regression', not {self.score!r}")
        if self.score == "probability" and not self.label and self.enabled:
            raise ValueError("label: the label whose probability is the score (or score: regression)")
        if self.score == "regression" and self.label:
            raise ValueError("label is not read with score: regression")
        if self.target_retention is not None and not 0.0 < self.target_retention <= 1.0:
            raise ValueError(f"target_retention must be in (0, 1], not {self.target_retention}")
        if self.target_of not in ("input", "stage"):
            raise ValueError(f"target_of must be 'input' or 'stage', not {self.target_of!r}")
        if self.batch_size < 1 or (self.max_length is not None and self.max_length < 2):
            raise ValueError("batch_size must be >= 1 and max_length >= 2")
        if self.threshold != self.threshold:
            raise ValueError("threshold is NaN: no score is below it, every document would be kept")
        if self.sample_docs < 1:
            raise ValueError(
                f"sample_docs must be >= 1 (the documents the calibration samples), not {self.sample_docs}"
            )
        hf_models.check_resources(self.num_cpus, self.num_gpus, self.actors)
        if not self.name.isidentifier():
            raise ValueError(f"name must be an identifier (a column name), not {self.name!r}")


@dataclass(frozen=True)
class Head:
    """How a model's logits become its score (read from its config, checked against the section)."""

    index: int  # the logit of the score
    function: str  # "softmax", "sigmoid" or "none" (the pipeline's choice for the model)


def head_of(cfg: ClassifierModelConfig, model_config: Any) -> Head:
    labels = {int(k): str(v) for k, v in (model_config.id2label or {}).items()}
    n = int(model_config.num_labels)
    problem = getattr(model_config, "problem_type", None)
    if cfg.score == "regression":
        if n != 1:
            raise ConfigError(f"{cfg.model}: score: regression needs a one-output head, this one has {n}")
        return Head(0, "none")
    assert cfg.label is not None
    by_name = {v: k for k, v in labels.items()}
    if cfg.label in by_name:
        index = by_name[cfg.label]
    elif cfg.label.isdigit() and int(cfg.label) < n:
        index = int(cfg.label)
    else:
        raise ConfigError(f"{cfg.name}.label: {cfg.label!r} is not a label of {cfg.model}: {sorted(by_name)}")
    # transformers.pipeline("text-classification")'s default function for this model
    if problem == "regression":
        function = "none"
    elif problem == "multi_label_classification" or n == 1:
        function = "sigmoid"
    else:
        function = "softmax"
    return Head(index, function)


def scores_of(logits: np.ndarray, head: Head) -> np.ndarray:
    """The score of each row of logits, computed as the pipeline does (float32 numpy)."""
    x: np.ndarray = logits.astype(np.float32)
    if head.function == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        x = e / e.sum(axis=-1, keepdims=True)
    elif head.function == "sigmoid":
        x = 1.0 / (1.0 + np.exp(-x))
    return x[:, head.index].astype(np.float64)


class ClassifierModel:
    """One configured model: its spec (what a worker loads) and its head, checked when built (the
    config and tokenizer only: a bad directory, head or tokenizer is one line before any work)."""

    def __init__(self, cfg: ClassifierModelConfig) -> None:
        self.cfg = cfg
        path = hf_models.check_dir(cfg.model, f"classifier[{cfg.name}]")
        self.spec = hf_models.ModelSpec(path, "classifier", cfg.max_length, cfg.batch_size)
        self.head = head_of(cfg, hf_models.Checked(self.spec).config)

    def digested(self) -> hf_models.ModelSpec:
        """The spec with the digest of the model's files (the cache key of its results)."""
        if not self.spec.digest:
            self.spec = replace(self.spec, digest=hf_models.digest(self.spec.path))
        return self.spec

    @property
    def resources(self) -> hf_models.Resources:
        return hf_models.Resources(self.cfg.num_cpus, self.cfg.num_gpus, self.cfg.actors)


class Classifier(GlobalStage):
    """Drops documents a model scores below its threshold (reason ``low_<name>``), or NaN or infinite
    (``non_finite_<name>``: no threshold can keep or drop them, a broken model or an overflow)."""

    name: ClassVar[str] = "classifier"

    @dataclass
    class Config:
        #: the configured models (the YAML section: one mapping or a list of them)
        models: list[ClassifierModelConfig] = field(default_factory=list)

    @classmethod
    def parse_config(cls, data: Any, where: str) -> Classifier.Config:
        """The section as YAML gives it: nothing, one mapping, or a list of mappings."""
        if data is None:
            return cls.Config()
        items = data if isinstance(data, list) else [data]
        models = []
        for j, item in enumerate(items):
            at = f"{where}[{j}]" if isinstance(data, list) else where
            if not isinstance(item, dict):
                raise ConfigError(f"{at}: expected a mapping of options")
            models.append(from_dict(ClassifierModelConfig, item, at))
        names = [m.name for m in models if m.enabled]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: two models have the same name; give each its own `name`")
        return cls.Config(models)

    def __init__(self, cfg: Config) -> None:
        hf_models.need_extra("classifier")
        self.models = [ClassifierModel(m) for m in cfg.models if m.enabled]

    @classmethod
    def from_config(cls, cfg: Config) -> Classifier | None:
        return cls(cfg) if any(m.enabled for m in cfg.models) else None

    def prepare(self, batch: pa.RecordBatch) -> pa.Table:
        return pa.table(
            {
                "id": batch.column("id"),
                "text": batch.column("text"),
                "words": pa.array(word_counts(batch), pa.int64()),
            }
        )

    def resolve(
        self, key_files: Sequence[Path], workdir: Path, run: RunContext, executor: Executor | None = None
    ) -> pa.Table:
        if not key_files:
            return DROPS_SCHEMA.empty_table()
        words = pa.concat_tables([pq.read_table(f, columns=["id", "words"]) for f in key_files])
        keep = np.ones(words.num_rows, dtype=bool)
        reasons = np.full(words.num_rows, None, dtype=object)
        thresholds = {}
        for m in self.models:
            scores = np.concatenate([s for s in self.scores(m, key_files, run, executor)])
            # NaN passes no threshold test (every comparison is False): such a document goes on its own
            finite = np.isfinite(scores)
            odd = ~finite & keep
            reasons[odd] = f"non_finite_{m.cfg.name}"
            keep &= ~odd
            fw = words.filter(pa.array(finite))
            thr = self.threshold(m, scores[finite], fw["words"].to_numpy(), run.input_words, fw["id"])
            thresholds[m.cfg.name] = thr
            low = (scores < thr) & keep
            reasons[low] = f"low_{m.cfg.name}"
            keep &= ~low
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "thresholds.json").write_text(json.dumps(thresholds, sort_keys=True))
        drop = np.flatnonzero(~keep)
        table = pa.table(
            {
                "id": words["id"].take(pa.array(drop)),
                "reason": pa.array(reasons[drop].tolist(), pa.string()),
                "dup_of": pa.nulls(len(drop), pa.string()),
            },
            schema=DROPS_SCHEMA,
        )
        return table.sort_by("id")

    def scores(
        self, m: ClassifierModel, key_files: Sequence[Path], run: RunContext, executor: Executor | None
    ) -> list[np.ndarray]:
        """Each key file's scores under model ``m`` (from the cache, or run now), and a copy beside
        the key file that the next segment reads (``annotate``)."""
        assert run.cache is not None
        cache = run.cache / "classifier"
        args = [(m.digested(), f, cache) for f in key_files]
        files = hf_models.run_on_models(
            executor, hf_models.run_model_file, args, f"classifier {m.cfg.name}", m.resources
        )
        out = []
        for f, res in zip(key_files, files, strict=True):
            logits = hf_models.read_result(Path(res))
            s = scores_of(logits, m.head) if len(logits) else np.zeros(0, dtype=np.float64)
            ids = pq.read_table(f, columns=["id"]).column("id")
            write_table_atomic(_score_file(f, m.cfg.name), pa.table({"id": ids, "score": s}))
            out.append(s)
        return out

    def threshold(
        self, m: ClassifierModel, scores: np.ndarray, words: np.ndarray, run_words: int, ids: Any
    ) -> float:
        c = m.cfg
        if c.target_retention is None:
            return c.threshold
        stage_words = int(words.sum())
        fraction = c.target_retention
        if c.target_of == "input" and run_words and stage_words > 0:
            fraction = min(1.0, fraction * run_words / stage_words)
        if fraction >= 1.0:
            return float("-inf")
        if len(scores) > c.sample_docs:
            from llmpipe import _core

            h = np.frombuffer(_core.content_hashes(ids.to_pylist()), dtype="<u8")[::2]
            pick = np.argsort(h, kind="stable")[: c.sample_docs]
            scores, words = scores[pick], words[pick]
        return calibrate(scores, words, fraction)

    def annotate(self, batch: pa.RecordBatch, key_file: Path, counts: StageCounts) -> pa.RecordBatch:
        """The scores of ``batch`` (documents of ``key_file``'s part) as columns, and their histogram."""
        ids = batch.column("id")
        for m in self.models:
            path = _score_file(key_file, m.cfg.name)
            table = _scores(str(path), path.stat().st_mtime_ns)
            where = pc.index_in(ids, value_set=table.column("id"))
            s = table.column("score").take(where).to_numpy(zero_copy_only=False)
            counts.counters.update(histogram(m.cfg.name, s, m.cfg.score == "regression"))
            if odd := int((~np.isfinite(s)).sum()):
                counts.counters[f"{m.cfg.name} non-finite"] += odd
            f = pa.field(m.cfg.name, pa.float64(), metadata={SCORE_FIELD_KEY: b"1"})
            i = batch.schema.get_field_index(m.cfg.name)
            col = pa.array(s, pa.float64())
            batch = batch.set_column(i, f, col) if i >= 0 else batch.append_column(f, col)
        return batch


def _score_file(key_file: Path, name: str) -> Path:
    return key_file.with_name(key_file.name.replace(".keys.parquet", f".{name}.scores.parquet"))


@lru_cache(maxsize=4)
def _scores(path: str, mtime_ns: int) -> pa.Table:
    t = pq.read_table(path)
    return pa.table({"id": t.column("id").combine_chunks(), "score": t.column("score").combine_chunks()})


def histogram(name: str, scores: np.ndarray, regression: bool) -> dict[str, int]:
    """Counts of the finite ``scores`` in 20 bins: of [0, 1] for probabilities, of 0.5 from -5 to 5 for
    a regression score (the ends take what lies beyond); NaN and infinities are counted apart."""
    lo, width = (-5.0, 0.5) if regression else (0.0, 1.0 / BINS)
    scores = scores[np.isfinite(scores)]
    b = np.clip(np.floor((scores - lo) / width), 0, BINS - 1).astype(np.int64)
    out: dict[str, int] = {}
    for k, n in zip(*np.unique(b, return_counts=True), strict=True):
        a = lo + int(k) * width
        out[f"{name} [{a:+.2f},{a + width:+.2f})"] = int(n)
    return out
