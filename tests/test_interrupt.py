"""Ctrl-C stops a long Rust call (BPE training) promptly, with the CLI's one-line message and exit 130."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_ctrl_c_stops_bpe_training_promptly(data_dir: Path, tmp_path: Path) -> None:
    text = gzip.decompress((data_dir / "reference" / "jargon.txt.gz").read_bytes())
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        for i in range(16):  # ~27 MB, every copy a little different: a long count and a long merge loop
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
    # inside the core's training call: its worker and Rust threads have started (however slow the imports)
    deadline = time.monotonic() + 120
    while len(os.listdir(f"/proc/{proc.pid}/task")) < 3 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(1)
    assert proc.poll() is None, proc.communicate()
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    waited = time.monotonic() - t0
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["llmpipe: interrupted"], err
    # the training would run for minutes; without the stop flag the signal waits for it to finish
    assert waited < 10, waited
    assert not (tmp_path / "t.json").exists()
