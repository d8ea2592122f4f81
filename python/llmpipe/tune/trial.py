"""One sweep trial: a real trainer run (``-m llmpipe.train``, one process or a torchrun gang) whose
validation losses are read from its metrics.jsonl as they are written and reported to Ray Tune.

The run directory is ``OUT/trials/TRIAL_ID``: its config.yaml, metrics.jsonl, train.log and DCP
checkpoints. A trial restarted after a driver was killed resumes from its own latest checkpoint (the
trainer's ``checkpoint.resume``). The trainer dies with the trial: it runs in its own process group,
is sent SIGKILL when the thread that started it ends (``PR_SET_PDEATHSIG``), and is killed in ``finally``.

The trainer is paused (SIGSTOP to its process group) from the moment a validation record appears until
Ray Tune has taken the decision on it: a trainer faster than Tune's result loop would otherwise train
past the rung at which ASHA stops it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmpipe.tune.space import overrides

POLL_S = 0.2


@dataclass
class TrialSpec:
    script: Path | None  # a trainer script; None: the package's trainer (-m llmpipe.train)
    trainer_config: Path | None
    data: Path
    trials_dir: Path
    nproc: int = 1
    threads: int = 1  # OMP threads per trainer process
    bytes_per_token: float = 0.0  # for val_bpb; 0: not reported
    fixed: list[str] = field(default_factory=list)  # overrides every trial takes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        # SIGKILL: the trainer may be paused (SIGSTOP) when its trial dies, and only SIGKILL ends a
        # stopped process
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def command(spec: TrialSpec, config: dict[str, Any], run_dir: Path) -> list[str]:
    if spec.nproc > 1:
        launcher = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={spec.nproc}",
            "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
        ]  # fmt: skip
    else:
        launcher = [sys.executable]
    entry = [str(spec.script)] if spec.script is not None else ["-m", "llmpipe.train"]
    cmd = [*launcher, *entry, "--data", str(spec.data), "--out", str(run_dir)]
    if spec.trainer_config is not None:
        cmd += ["--config", str(spec.trainer_config)]
    return cmd + [f"--{o}" for o in [*spec.fixed, *overrides(config)]]


def metrics_record(rec: dict[str, Any], bytes_per_token: float) -> dict[str, Any] | None:
    """The Tune result for one metrics.jsonl record, or None if it holds no validation loss."""
    if "val_loss" not in rec:
        return None
    out = {"step": int(rec["step"]), "val_loss": float(rec["val_loss"])}
    if bytes_per_token > 0:
        out["val_bpb"] = out["val_loss"] / math.log(2) / bytes_per_token
    return out


def run_trial(config: dict[str, Any], spec: TrialSpec) -> None:
    """Ray Tune's function trainable (bound to ``spec`` with ``tune.with_parameters``)."""
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    run_dir = spec.trials_dir / trial_id
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "launches.jsonl", "a") as f:  # one line per start: a resumed sweep adds one
        f.write(json.dumps({"time": time.time(), "config": config}) + "\n")
    metrics = run_dir / "metrics.jsonl"
    offset = metrics.stat().st_size if metrics.exists() else 0  # a restarted trial reports new records only
    env = {**os.environ, "OMP_NUM_THREADS": str(spec.threads)}
    if spec.nproc == 1:  # the trainer's own default rendezvous port would clash between trials
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    cmd = command(spec, config, run_dir)
    with open(run_dir / "train.log", "ab") as log:
        log.write((" ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=run_dir, preexec_fn=_die_with_parent
        )
    try:
        buf = ""
        while True:
            done = proc.poll() is not None
            if metrics.exists():
                with open(metrics) as f:
                    f.seek(offset)
                    chunk = f.read()
                offset += len(chunk.encode())
                buf += chunk
                *lines, buf = buf.split("\n")
                results = [metrics_record(json.loads(x), spec.bytes_per_token) for x in lines if x.strip()]
                results = [r for r in results if r is not None]
                if results and not done:
                    _signal(proc, signal.SIGSTOP)  # hold the trainer until Tune has decided
                for res in results:
                    tune.report(res)  # returns once Tune lets the trial go on; a stop ends the thread
                if results and not done:
                    _signal(proc, signal.SIGCONT)
            if done:
                break
            time.sleep(POLL_S)
        if proc.returncode != 0:
            tail = (run_dir / "train.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"trainer exited with {proc.returncode} (see {run_dir}/train.log):\n{tail}")
    finally:
        if proc.poll() is None:
            _signal(proc, signal.SIGTERM)
            _signal(proc, signal.SIGCONT)  # a paused trainer handles its SIGTERM once continued
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
