"""The trainer's default shard check (``data.verify: blocks``) stops a run on a byte changed in the middle
of a shard larger than 2 MiB, with one line naming the shard and byte range (``fast`` would train on it);
shards whose manifest predates block checksums still train, with one ``note:`` line. Real torchrun."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from conftest import ROOT, torchrun
from llmpipe.train.byte_shards import write_byte_shards

TINY = str(ROOT / "configs/train/tiny.yaml")
QUIET = ["--metrics.tensorboard=false", "--train.val_every=0", "--train.log_every=1", "--train.steps=1"]


def test_default_check_stops_on_a_byte_flipped_mid_shard(data_dir: Path, tmp_path: Path) -> None:
    text = tmp_path / "gcide.txt"
    with gzip.open(data_dir / "reference" / "gcide.dict.gz", "rb") as f:
        text.write_text(f.read(3 << 20).decode("utf-8", "replace"))
    clean = write_byte_shards(text, tmp_path / "clean", seq_len=511)  # 4096 rows of 1 KiB: 4 MiB shards
    shards = tmp_path / "shards"
    shutil.copytree(clean, shards)
    m = json.loads((shards / "manifest.json").read_text())
    entry = max(m["splits"]["train"]["shards"], key=lambda e: e["bytes"])
    at = entry["bytes"] // 2 & ~1  # a token's low byte, outside the first and last MiB
    assert 1 << 20 < at < entry["bytes"] - (1 << 20)
    shard = shards / entry["file"]
    data = bytearray(shard.read_bytes())
    data[at] ^= 0x01
    shard.write_bytes(bytes(data))

    run = ["--config", TINY, "--out", str(tmp_path / "run"), *QUIET]
    proc = torchrun(1, "--data", str(shards), *run, check=False)
    start = at >> 20 << 20
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0 and "exitcode  : 2" in proc.stderr, proc.stderr[-3000:]
    assert errors == [
        f"error: {shard}: bytes {start}-{start + (1 << 20) - 1} differ from the manifest's block checksums "
        "(corrupted shard)"
    ], proc.stderr[-3000:]
    assert not (tmp_path / "run" / "checkpoints").exists()

    # the same shards as an older llmpipe wrote them (no block checksums, the byte intact): they train,
    # checked as fast, and the run says so once
    shutil.copy(clean / entry["file"], shard)
    for split in m["splits"].values():
        for e in split["shards"]:
            del e["block_bytes"], e["block_crc32"]
    (shards / "manifest.json").write_text(json.dumps(m))
    proc = torchrun(1, "--data", str(shards), *run)
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "no block checksums" in notes[0] and "verify=fast" in notes[0], proc.stdout
