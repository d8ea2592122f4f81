"""Ctrl-C stops a long Rust call (BPE training) promptly, with the CLI's one-line message and exit 130."""

from __future__ import annotations

import gzip
import signal
import subprocess
import sys
import time
from pathlib import Path


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
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
