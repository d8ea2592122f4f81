"""The run's data: one shard directory (``data.path``) or a weighted mixture (``data.sources``).

Returns the training loader, the training view (seq_len, vocab, tokenizer) and the validation splits
by name: ``{"": val}`` for one directory, one per source for a mixture (validation loss per source).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.data.loader import MixtureLoader
from llmpipe.data.mixture import MixedShards, MixStage, MixtureOrder
from llmpipe.errors import LlmpipeError
from llmpipe.train.config import DataConfig, RunConfig
from llmpipe.train.parallel import Dist
from llmpipe.train.schedule import BatchSchedule


@dataclass
class RunData:
    train: ShardDataset | MixedShards
    loader: TokenLoader
    val: dict[str, ShardDataset]


def first_directory(data: DataConfig) -> Path:
    """The run's (first) shard directory: its tokenizer.json is every source's (one sha256)."""
    path = data.sources[0].path if data.sources else data.path
    assert path is not None
    return path


def open_train(data: DataConfig) -> ShardDataset | MixedShards:
    if not data.sources:
        assert data.path is not None
        return ShardDataset(data.path, "train", verify=data.verify)
    names = [s.name for s in data.sources]
    sets = [ShardDataset(s.path, "train", verify=data.verify) for s in data.sources if s.path is not None]
    return MixedShards(names, sets)


def verify_notices(data: RunData) -> list[str]:
    """The shard checks' notices (e.g. a manifest without block checksums), each directory once."""
    sets = data.train.datasets if isinstance(data.train, MixedShards) else [data.train]
    out: list[str] = []
    for ds in [*sets, *data.val.values()]:
        out += [n for n in ds.notices if n not in out]
    return out


def val_notices(data: RunData, dp: int = 1, batch_size: int = 0, pipeline: bool = False) -> list[str]:
    """A validation split the run cannot measure, said once at the start instead of silently: one
    without samples (a curate run with pack.val_fraction 0, or too little text for one), one with fewer
    samples than the ``dp`` data-parallel ranks (each rank needs one), and with pipeline stages
    (``pipeline``) one with fewer than ``batch_size`` per rank (the stages run whole training batches)."""
    out: list[str] = []
    for ds in data.val.values():
        n = len(ds)
        if n == 0:
            out.append(
                f"{ds.directory}: its val split holds no samples, so this run measures no val_loss on it "
                "(curate with pack.val_fraction > 0 and enough text for one sample in 1/val_fraction)"
            )
        elif n < dp:
            out.append(
                f"{ds.directory}: its val split holds {n} sample(s), fewer than the {dp} data-parallel "
                "ranks (each needs one), so this run measures no val_loss on it (curate more text or "
                "run on fewer ranks)"
            )
        elif pipeline and n // dp < batch_size:
            out.append(
                f"{ds.directory}: its val split holds {n} sample(s), fewer than data.batch_size "
                f"{batch_size} per data-parallel rank ({dp}) that the pipeline stages run, so this run "
                "measures no val_loss on it"
            )
    return out


def mixture_stages(data: DataConfig, schedule: BatchSchedule) -> list[MixStage]:
    """Stage weights in source order, each from the sample position where its step begins."""
    names = [s.name for s in data.sources]
    stages = [MixStage(0, tuple(s.weight for s in data.sources))]
    for st in data.stages:
        weights = tuple(float(st.weights.get(n, 0.0)) for n in names)
        stages.append(MixStage(schedule.samples_before(st.from_step), weights))
    return stages


def build_data(
    cfg: RunConfig, d: Dist, schedule: BatchSchedule, train: ShardDataset | MixedShards
) -> RunData:
    """The loader and validation splits over ``train`` (from ``open_train``)."""
    data = cfg.data
    common = {
        "rank": d.dp_rank,  # tp and pp ranks of one data-parallel replica read the same batch
        "world_size": d.dp_size,
        "device": d.device,
        "prefetch": data.prefetch,
        "doc_ids": cfg.model.doc_mask,  # per-token document ids only when the model masks with them
    }
    need = data.batch_size * d.dp_size
    if len(train) < need:
        n = len(train)
        if n == 0:
            advice = "the shards hold no training samples: curate more text (or lower pack.val_fraction)"
        elif n >= d.dp_size:
            advice = f"lower --data.batch_size to at most {n // d.dp_size}"
        else:
            advice = f"fewer samples than ranks: run on at most {n} rank(s) or curate more text"
        raise LlmpipeError(
            f"{train.directory}: {n} training samples, fewer than one global batch ({need} = "
            f"data.batch_size {data.batch_size} x {d.dp_size} data-parallel ranks); {advice}"
        )
    loader: TokenLoader
    if isinstance(train, MixedShards):
        order = MixtureOrder(
            train.mix_sources([s.max_epochs for s in data.sources]),
            mixture_stages(data, schedule),
            seed=data.seed,
            policy=data.on_exhausted,
        )
        loader = MixtureLoader(train, order, data.batch_size, **common)  # type: ignore[arg-type]
        val = {
            s.name: ShardDataset(s.path, "val", verify=data.verify)
            for s in data.sources
            if s.path is not None
        }
    else:
        loader = TokenLoader(train, data.batch_size, seed=data.seed, **common)  # type: ignore[arg-type]
        assert data.path is not None
        val = {"": ShardDataset(data.path, "val", verify=data.verify)}
    return RunData(train, loader, val)
