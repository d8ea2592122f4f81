"""Ctrl-C stops a long Rust call (BPE training) and a curate run's workers promptly, with the CLI's
one-line message and exit 130; the interrupted curate finishes when run again."""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from procs import procs, with_default_sigint, with_descendants


def test_ctrl_c_stops_bpe_training_promptly(data_dir: Path, tmp_path: Path) -> None:
    text = gzip.decompress((data_dir / "reference" / "gcide.dict.gz").read_bytes())
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        for i in range(6):  # ~240 MB, every copy a little different: a count of many seconds
            f.write(text.replace(b"the", f"the{i}".encode()))
    exe = Path(sys.executable).with_name("llmpipe")
    cmd = [
        str(exe),
        "tokenizer",
        "train",
        str(big),
        "--vocab-size",
        "200000",
        "--out",
        str(tmp_path / "t.json"),
    ]
    proc = subprocess.Popen(
        with_default_sigint(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # said just before the core's training call
    assert first.startswith("training a byte-level BPE"), first
    time.sleep(1)  # inside the call: counting words (many seconds), then merging
    assert proc.poll() is None, proc.communicate()
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    waited = time.monotonic() - t0
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["llmpipe: interrupted"], err  # after the first line, only this
    # the training would run for minutes; without the stop flag the signal waits for it to finish
    assert waited < 10, waited
    assert not (tmp_path / "t.json").exists()


def test_ctrl_c_stops_curate_workers_mid_task_and_the_run_resumes(data_dir: Path, tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("llmpipe")
    out = tmp_path / "out"
    # 105 KB in chunks of 20 KB: three parts, one queued behind the two running ones
    src = data_dir / "web" / "cc-en-head-0091.jsonl"
    cmd = [str(exe), "curate", str(src), "--out", str(out), "--workers", "2", "--chunk-mb", "0.02", "--quiet"]
    # every part's first step takes a minute: the workers are surely inside a task when Ctrl-C comes,
    # and without stopping them the run would end only after theirs (and the ones queued behind)
    env = {**os.environ, "LLMPIPE_DELAY_AT": "segment 0:60"}
    # a terminal's Ctrl-C signals the whole foreground process group: the driver and its workers
    proc = subprocess.Popen(with_default_sigint(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    parts = re.match(r"curate: 1 input\(s\) in (\d+) part\(s\)", first)
    if parts is None or int(parts[1]) < 3:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(first)
    time.sleep(3)  # the forked workers are in their first tasks
    workers = with_descendants({proc.pid}) - {proc.pid}
    assert len(workers) >= 2, workers
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    waited = time.monotonic() - t0
    assert proc.returncode == 130, err
    # no traceback, from any process; what to do next
    assert err.strip().splitlines() == ["llmpipe: interrupted; the same command resumes the run"], err
    assert waited < 15, waited  # a task left to finish would take ~60 s
    assert not workers & set(procs()), "a worker outlived the interrupted run"
    assert not (out / "manifest.json").exists()

    done = subprocess.run(cmd, capture_output=True, text=True)  # again, without the delay
    assert done.returncode == 0, done.stderr
    assert "kept" in done.stdout and (out / "manifest.json").is_file()
