"""``llmpipe sweep``: a search over trainer keys on Ray Tune, every trial a real trainer run.

    OUT/tune/sweep/     Ray Tune's experiment state (what a restarted sweep resumes from)
    OUT/trials/ID/      each trial's trainer run: config.yaml, metrics.jsonl, train.log, checkpoints/
    OUT/results.csv, results.json, plot.html, best.yaml (the best trial's full trainer config)

Search: grid and random (Tune's variant generator) or Optuna's TPE. ASHA stops trials whose validation
loss (or bits per byte) is in the worst 1 - 1/reduction_factor at a rung (steps grace_period x rf^k).
Running ``llmpipe sweep`` again on the same OUT resumes the experiment: finished trials are kept,
unfinished ones restart and their trainer resumes from its latest checkpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from llmpipe.config import config_file, from_dict, load_yaml
from llmpipe.errors import ConfigError, InputError, LlmpipeError
from llmpipe.tune.space import Param, overrides, parse_space, to_tune
from llmpipe.tune.trial import TrialSpec, run_trial

EXPERIMENT = "sweep"


@dataclass
class AshaConfig:
    enabled: bool = True
    grace_period: int = 0  # steps before the first rung; 0: the trainer's train.val_every
    reduction_factor: float = 2.0  # keep the best 1/rf at each rung


@dataclass
class SweepConfig:
    data: Path | None = None  # shard directory (`llmpipe curate` output)
    out: Path | None = None  # the sweep directory (or --out)
    trainer_config: Path | None = None  # the base trainer YAML every trial starts from
    fixed: dict[str, Any] = field(default_factory=dict)  # section.key: value, for every trial
    space: dict[str, Any] = field(default_factory=dict)  # section.key: {rule: values} (tune/space.py)
    search: Literal["grid", "random", "tpe"] = "grid"
    num_samples: int = 1  # grid: repeats of the whole grid; random, tpe: trials
    metric: Literal["val_loss", "val_bpb"] = "val_loss"
    bytes_per_token: float = 0.0  # val_bpb: the shards' UTF-8 bytes per token (1 for byte shards)
    asha: AshaConfig = field(default_factory=AshaConfig)
    nproc: int = 1  # trainer processes per trial (> 1: a torchrun gang)
    cpus_per_trial: float = 0.0  # Ray CPUs reserved per trial; 0: nproc
    max_concurrent: int = 0  # 0: as many as the cluster's CPUs allow
    address: str | None = None  # Ray cluster ("auto", "HOST:PORT"); None: start a local one
    seed: int = 0  # random / TPE sampling
    trainer: Path | None = None  # a trainer script (train/pretrain.py); None: ``-m llmpipe.train``


def load_sweep(path: Path, out: Path | None = None) -> SweepConfig:
    cfg = load_runs_file(SweepConfig, path, out)
    if cfg.metric == "val_bpb" and cfg.bytes_per_token <= 0:
        raise ConfigError(f"{path}: metric val_bpb needs bytes_per_token (1.0 for byte-level shards)")
    if cfg.nproc < 1 or cfg.num_samples < 1:
        raise ConfigError(f"{path}: nproc and num_samples must be at least 1")
    return cfg


class _RunsFile(Protocol):
    data: Path | None
    out: Path | None


RunsFile = TypeVar("RunsFile", bound=_RunsFile)


def load_runs_file(cls: type[RunsFile], path: Path, out: Path | None) -> RunsFile:
    """A sweep or ladder file: typed, ``out`` from ``--out`` if given, data and out required, and data a
    shard directory (every trial would fail on one that holds no shards: say so before Ray starts)."""
    cfg = from_dict(cls, load_yaml(path), str(path))
    if out is not None:
        cfg.out = out
    if cfg.data is None or cfg.out is None:
        raise ConfigError(f"{path}: data and out are required (out may also come from --out)")
    if not (cfg.data / "manifest.json").is_file():
        raise InputError(f"{path}: data {cfg.data} is not a shard directory written by `llmpipe curate`")
    return cfg


def trainer_script(cfg: SweepConfig) -> Path | None:
    """The sweep file's trainer script, or None for the package's trainer (``-m llmpipe.train``)."""
    if cfg.trainer is None:
        return None
    if not cfg.trainer.is_file():
        raise ConfigError(f"trainer {cfg.trainer} not found (leave trainer out to use llmpipe's own)")
    return cfg.trainer.resolve()


def trainer_config_path(cfg: SweepConfig) -> Path | None:
    """The base trainer config every trial is given (``--config``), as an absolute path: a file, or the
    name of one that ships with llmpipe (``tiny``), found as the trainer itself finds it."""
    if cfg.trainer_config is None:
        return None
    return config_file(cfg.trainer_config, "train").resolve()


def fixed_overrides(cfg: SweepConfig) -> list[str]:
    return overrides(cfg.fixed)


class TrainerConfigs:
    """The trainer's own typed config (``llmpipe.train.config``): every trial's overrides are checked
    before anything runs, and the best config is written by the trainer's ``dump``."""

    def __init__(self, cfg: SweepConfig) -> None:
        from llmpipe.train import config as tc

        self.tc = tc
        self.cfg = cfg

    def resolve(self, extra: list[str]) -> Any:
        c = self.tc.load_config(self.cfg.trainer_config, [*fixed_overrides(self.cfg), *extra])
        c.data.path = self.cfg.data
        self.tc.validate(c)
        return c

    def check(self, params: list[Param]) -> Any:
        """Resolve the base config and each listed value / bound alone; returns the base config."""
        base = self.resolve([])
        for p in params:
            for v in p.values:
                self.resolve(overrides({p.key: v}))
        return base

    def dump(self, extra: list[str]) -> str:
        return str(self.tc.dump(self.resolve(extra)))


def _tuner(cfg: SweepConfig, spec: TrialSpec, params: list[Param], max_t: int, val_every: int) -> Any:
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler

    storage = (cfg.out / "tune").resolve()  # type: ignore[operator]
    cpus = cfg.cpus_per_trial or float(cfg.nproc)
    trainable = tune.with_resources(tune.with_parameters(run_trial, spec=spec), {"cpu": cpus})
    space = to_tune(params, cfg.search)
    if (storage / EXPERIMENT).is_dir() and tune.Tuner.can_restore(str(storage / EXPERIMENT)):
        print(  # Tune restores by unpickling; llmpipe cannot check what is in there (docs/scaling-laws.md)
            f"resuming the sweep in {storage / EXPERIMENT} (Ray Tune unpickles this state: "
            "resume only a sweep you ran yourself)",
            flush=True,
        )
        return tune.Tuner.restore(
            str(storage / EXPERIMENT),
            trainable,
            resume_unfinished=True,
            resume_errored=True,
            param_space=space,
        )
    if cfg.asha.enabled:
        grace = cfg.asha.grace_period or val_every or max_t
        from llmpipe.tune.asha import ResumableASHA

        scheduler: Any = ResumableASHA(
            spec.trials_dir, cfg.metric, cfg.bytes_per_token, time_attr="step", max_t=max_t,
            grace_period=grace, reduction_factor=cfg.asha.reduction_factor,
        )  # fmt: skip
    else:
        scheduler = FIFOScheduler()
    search_alg: Any = None
    if cfg.search == "tpe":
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(seed=cfg.seed)
    elif cfg.search == "random":
        from ray.tune.search import BasicVariantGenerator

        search_alg = BasicVariantGenerator(random_state=cfg.seed)
    if cfg.max_concurrent and cfg.search == "tpe":  # TPE learns from finished trials: do not run ahead
        from ray.tune.search import ConcurrencyLimiter

        search_alg = ConcurrencyLimiter(search_alg, max_concurrent=cfg.max_concurrent)
    tune_cfg = tune.TuneConfig(
        metric=cfg.metric,
        mode="min",
        scheduler=scheduler,
        search_alg=search_alg,
        num_samples=cfg.num_samples,
        max_concurrent_trials=cfg.max_concurrent or None,
    )
    run_cfg = tune.RunConfig(
        name=EXPERIMENT,
        storage_path=str(storage),
        failure_config=tune.FailureConfig(max_failures=0),
        verbose=1,
    )
    return tune.Tuner(trainable, param_space=space, tune_config=tune_cfg, run_config=run_cfg)


def _ray_init(cfg: SweepConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(
            address=cfg.address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError) as e:
        from llmpipe.distributed.executor import auth_hint

        raise LlmpipeError(
            f"cannot reach the Ray cluster at {cfg.address}: {e}{auth_hint(cfg.address)}"
        ) from e


def run_sweep(cfg: SweepConfig) -> dict[str, Any]:
    """Run (or resume) the sweep; write the results; return the results summary."""
    from llmpipe.tune.results import write_results

    assert cfg.out is not None and cfg.data is not None
    script = trainer_script(cfg)
    params = parse_space(cfg.space)
    configs = TrainerConfigs(cfg)
    base = configs.check(params)
    out = cfg.out.resolve()
    spec = TrialSpec(
        script=script,
        trainer_config=trainer_config_path(cfg),
        data=cfg.data.resolve(),
        trials_dir=out / "trials",
        nproc=cfg.nproc,
        threads=max(1, int((cfg.cpus_per_trial or cfg.nproc) // cfg.nproc)),
        bytes_per_token=cfg.bytes_per_token,
        fixed=fixed_overrides(cfg),
    )
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")  # experiment state saved every second
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    _ray_init(cfg)
    tuner = _tuner(cfg, spec, params, base.train.steps, base.train.val_every)
    grid = tuner.fit()
    summary = write_results(out, grid, cfg, configs, max_steps=base.train.steps)
    if all(r["status"] == "error" for r in summary["trials"]):
        first = summary["trials"][0]["run_dir"]
        raise InputError(f"every trial failed; the first trainer's log: {first}/train.log")
    return summary
