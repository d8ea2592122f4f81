"""`llmpipe sweep` and `llmpipe scaling` on a real 2-node Ray cluster started on this machine.

The module starts a head (`ray start --head`) and a second node (`ray start --address`), one CPU each, in a
private temp dir, as tests/test_ray.py does; every trial is a real train/pretrain.py run on byte-level
shards of real text. Tests: a 4-trial grid with ASHA whose driver is killed once a trial has finished
and which then resumes without rerunning it; and a 3 sizes x 2 budgets ladder fitted end to end.
Teardown kills, by process id, what the cluster started (its temp dir or port in the command line, and
their descendants).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from procs import RAY_TEST_ENV, free_port, kill_all, procs, ray_agent_ports, ray_start, with_descendants

BIN = Path(sys.executable).parent
RAY = str(BIN / "ray")
LLMPIPE = str(BIN / "llmpipe")
TEXT = "reference/books/tiny-shakespeare.txt"
# tiny trials: a 32-wide model, 20 steps, validation every 5 (the ASHA rungs), fp32, no TensorBoard
FIXED = {
    "train.steps": 20, "train.val_every": 5, "train.val_batches": 2, "train.log_every": 5,
    "optim.warmup_steps": 2, "checkpoint.every": 10, "metrics.tensorboard": False,
    "parallel.mixed_precision": "fp32", "model.dim": 32, "data.batch_size": 4, "guard.enabled": False,
}  # fmt: skip


@dataclass
class Cluster:
    temp_dir: Path
    port: int
    env: dict[str, str]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def owned(self) -> set[int]:
        table = procs()
        roots = {
            p
            for p, (_, c) in table.items()
            if p != os.getpid() and (str(self.temp_dir) in c or re.search(rf":{self.port}\b", c))
        }
        return with_descendants(roots, table)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    temp_dir = Path(tempfile.mkdtemp(prefix="llmtune", dir="/tmp"))  # short: Ray's unix socket paths
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
    env |= RAY_TEST_ENV
    c = Cluster(temp_dir, port, env)
    try:
        common = [
            "--num-cpus",
            "1",
            "--memory",
            str(1_500_000_000),
            "--object-store-memory",
            str(150_000_000),
        ]
        head = [RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
        head += ["--include-dashboard", "false"]  # the driver connects over GCS; no Jobs API needed
        head += ["--temp-dir", str(temp_dir), "--disable-usage-stats", *common]
        ray_start(
            lambda: [*head, "--ray-client-server-port", str(free_port()), *ray_agent_ports()], env, c.owned
        )
        worker = [RAY, "start", "--address", c.address, "--node-ip-address", "127.0.0.1", *common]
        ray_start(lambda: [*worker, *ray_agent_ports()], env, c.owned)
        yield c
    finally:
        kill_all(c.owned())
        subprocess.run(["rm", "-rf", str(temp_dir)], check=False)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    from llmpipe.train.byte_shards import write_byte_shards

    return write_byte_shards(data_dir / TEXT, tmp_path_factory.mktemp("tune") / "shards", max_chars=200_000)


def _finished(out: Path) -> set[str]:
    """Trial ids Ray Tune's saved experiment state records as finished (TERMINATED)."""
    done: set[str] = set()
    for f in (out / "tune" / "sweep").glob("experiment_state-*.json"):
        try:
            state = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for item in state.get("trial_data", []):
            trial = json.loads(item[0]) if isinstance(item, list) else item
            if isinstance(trial, dict) and trial.get("status") == "TERMINATED":
                done.add(str(trial.get("trial_id")))
    return done


def test_sweep_asha_stops_the_worst_and_a_killed_sweep_resumes(
    cluster: Cluster, shards: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    spec = tmp_path / "sweep.yaml"
    lrs = [3.0e-3, 1.0e-3, 1.0e-5, 3.0e-6]  # the good ones first: ASHA compares later trials to them
    spec.write_text(yaml.safe_dump({
        "data": str(shards), "out": str(out), "trainer_config": str(ROOT / "configs/train/tiny.yaml"),
        "fixed": FIXED, "space": {"optim.lr": {"grid": lrs}},
        "asha": {"grace_period": 5, "reduction_factor": 2}, "address": cluster.address,
    }))  # fmt: skip
    log = open(tmp_path / "driver1.log", "w")  # noqa: SIM115 (closed below)
    driver = subprocess.Popen(
        [LLMPIPE, "sweep", str(spec)], stdout=log, stderr=subprocess.STDOUT, env=cluster.env
    )
    try:
        deadline = time.time() + 400
        while not _finished(out) and driver.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        finished_before = _finished(out)
        assert finished_before, (tmp_path / "driver1.log").read_text()[-4000:]
    finally:
        driver.send_signal(signal.SIGKILL)  # the driver dies as if the machine running it went away
        driver.wait()
        log.close()
    proc = subprocess.run(
        [LLMPIPE, "sweep", str(spec)], capture_output=True, text=True, env=cluster.env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "resuming the sweep" in proc.stdout + proc.stderr
    results = json.loads((out / "results.json").read_text())
    rows = {r["trial_id"]: r for r in results["trials"]}
    assert len(rows) == 4 and sorted(r["config"]["optim.lr"] for r in rows.values()) == sorted(lrs)
    for tid in finished_before:  # finished before the kill: trained once, never again
        assert rows[tid]["launches"] == 1, rows[tid]
    assert all(r["status"] in ("completed", "stopped") for r in rows.values()), rows
    by_lr = {r["config"]["optim.lr"]: r for r in rows.values()}
    # ASHA: the best trial runs all 20 steps; at least one of the worst is stopped at a rung before the
    # end (which others it stops depends on the order trials reach a rung, so that is not asserted)
    assert by_lr[3.0e-3]["status"] == "completed" and by_lr[3.0e-3]["steps"] == 20
    stopped = [r for r in rows.values() if r["status"] == "stopped"]
    assert any(r["config"]["optim.lr"] <= 1.0e-5 for r in stopped), rows
    assert all(r["steps"] < 20 for r in stopped)
    best = results["best"]
    assert best["config"]["optim.lr"] in (3.0e-3, 1.0e-3) and best["val_loss"] < min(
        r["val_loss"] for r in stopped
    )
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 and {"trial_id", "status", "steps", "val_loss", "optim.lr"} <= set(table[0])
    assert "<img" in (out / "plot.html").read_text()
    from llmpipe.train.config import (
        load_config,  # the best config is a full trainer config the trainer accepts
    )

    cfg = load_config(out / "best.yaml", [])
    assert cfg.optim.lr == best["config"]["optim.lr"] and cfg.train.steps == 20 and cfg.model.dim == 32
    assert not [p for p in cluster.owned() if "pretrain.py" in procs().get(p, (0, ""))[1]]


def test_scaling_ladder_end_to_end(cluster: Cluster, shards: Path, tmp_path: Path) -> None:
    out = tmp_path / "ladder"
    spec = tmp_path / "ladder.yaml"
    fixed = {**FIXED, "optim.lr": 3.0e-3, "checkpoint.every": 0}
    del fixed["train.steps"], fixed["model.dim"]
    spec.write_text(yaml.safe_dump({
        "data": str(shards), "out": str(out), "trainer_config": str(ROOT / "configs/train/tiny.yaml"),
        "fixed": fixed, "address": cluster.address, "steps": [15, 30], "min_step": 5, "bootstrap": 10,
        "sizes": [{"dim": 16, "n_heads": 2, "n_layers": 1}, {"dim": 32, "n_heads": 2, "n_layers": 1},
                  {"dim": 64, "n_heads": 4, "n_layers": 2}],
        "flops": 1.0e15,
    }))  # fmt: skip
    proc = subprocess.run(
        [LLMPIPE, "scaling", str(spec)], capture_output=True, text=True, env=cluster.env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "compute-optimal at 1e+15 FLOPs" in proc.stdout
    fit = json.loads((out / "fit.json").read_text())
    # 3 sizes x (2 runs x their validations at steps >= 5: 15 -> 5, 10, 15; 30 -> 5 ... 30)
    assert len(fit["points"]) == 3 * (3 + 6)
    assert len({p["params"] for p in fit["points"]}) == 3
    a3 = fit["approach3"]
    assert all(v > 0 for v in (a3["E"], a3["A"], a3["B"])), a3
    from llmpipe.scaling import ChinchillaFit

    law = ChinchillaFit(**a3)
    for p in fit["points"]:  # the fitted law describes the measured losses
        assert law.loss(p["params"], p["tokens"]) == pytest.approx(p["loss"], rel=0.1), p
    opt = fit["optimum"]
    assert opt["flops"] == 1.0e15 and opt["params"] * opt["tokens"] * 6 == pytest.approx(1.0e15)
    assert "approach1" in fit
    png = (out / "scaling.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert (out / "results.csv").is_file()
    rows = json.loads((out / "results.json").read_text())["trials"]
    assert len(rows) == 6 and all(r["status"] == "completed" for r in rows)


def test_trials_get_the_trainer_config_by_path_packaged_names_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trainer_config: tiny`` (a config that ships with llmpipe) passes the check before Ray starts, so
    every trial must be given the same file: its packaged path, not ``$PWD/tiny`` (each trial failed on
    it). A file of the user's is given by its absolute path. No Ray needed: the trial's command."""
    from llmpipe.config import config_file
    from llmpipe.train.config import load_config
    from llmpipe.tune.sweep import SweepConfig, trainer_config_path
    from llmpipe.tune.trial import TrialSpec, command

    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine.yaml"
    mine.write_text((ROOT / "configs" / "train" / "tiny.yaml").read_text())
    packaged = config_file("tiny", "train").resolve()
    for given, want in (("tiny", packaged), ("tiny.yaml", packaged), ("mine.yaml", mine), (None, None)):
        cfg = SweepConfig(trainer_config=None if given is None else Path(given))
        path = trainer_config_path(cfg)
        assert path == want, given
        spec = TrialSpec(
            script=None, trainer_config=path, data=tmp_path / "s", trials_dir=tmp_path / "t", nproc=1,
            threads=1, bytes_per_token=0.0, fixed=[],
        )  # fmt: skip
        cmd = command(spec, {}, tmp_path / "run")
        if want is None:
            assert "--config" not in cmd
        else:
            given_to_trial = Path(cmd[cmd.index("--config") + 1])
            assert given_to_trial.is_absolute() and given_to_trial.is_file()
            load_config(given_to_trial, [])  # what the trial's trainer does with it
