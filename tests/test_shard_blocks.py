"""Per-block checksums of shards: written by the writer, equal to zlib's CRC-32 over the file's blocks,
checked by ``verify="blocks"`` (and ``llmpipe inspect --verify``), which catches the byte in the middle
of a large shard that ``fast`` misses; manifests written before block checksums still load."""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.data.format import BLOCK_BYTES
from llmpipe.data.verify import verify_directory
from llmpipe.errors import ShardError
from llmpipe.train.byte_shards import byte_shard_writer
from llmpipe.train.config import DataConfig
from llmpipe.train.data import RunData, verify_notices

SEQ_LEN = 1023  # rows of 1024 uint16 ids: 2 KiB


@pytest.fixture(scope="module")
def shards(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~5 MB of real dictionary text (bytes as token ids) in two train shards of 4 MiB and one smaller."""
    with gzip.open(data_dir / "reference" / "gcide.dict.gz", "rb") as f:
        raw = f.read(5 << 20)
    out = tmp_path_factory.mktemp("blocks") / "shards"
    w = byte_shard_writer(out, seq_len=SEQ_LEN, samples_per_shard=2048, val_fraction=0.01)
    w.add_documents([np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)])
    w.close()
    return out


def _copy(shards: Path, tmp_path: Path) -> tuple[Path, dict]:
    out = tmp_path / "s"
    shutil.copytree(shards, out)
    return out, json.loads((out / "manifest.json").read_text())


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_block_checksums_are_zlib_crc32_of_the_file_blocks(shards: Path) -> None:
    m = json.loads((shards / "manifest.json").read_text())
    entries = [e for s in m["splits"].values() for e in s["shards"]]
    assert any(e["bytes"] > 3 * BLOCK_BYTES for e in entries)
    for e in entries:
        data = (shards / e["file"]).read_bytes()
        assert e["block_bytes"] == BLOCK_BYTES == 1 << 20
        want = [zlib.crc32(data[i : i + BLOCK_BYTES]) for i in range(0, len(data), BLOCK_BYTES)]
        assert e["block_crc32"] == want
        assert len(want) == -(-e["bytes"] // BLOCK_BYTES)  # the last block is the shorter rest


def test_a_flipped_middle_byte_is_missed_by_fast_and_caught_by_blocks(shards: Path, tmp_path: Path) -> None:
    out, m = _copy(shards, tmp_path)
    entry = max(m["splits"]["train"]["shards"], key=lambda e: e["bytes"])
    shard = out / entry["file"]
    at = entry["bytes"] // 2 & ~1  # a token's low byte, outside the first and last MiB `fast` hashes
    assert BLOCK_BYTES < at < entry["bytes"] - BLOCK_BYTES
    _flip(shard, at)
    start = at // BLOCK_BYTES * BLOCK_BYTES
    where = f"bytes {start}-{start + BLOCK_BYTES - 1}"

    # the documented gap: fast opens the damaged shard and the loader hands its rows out
    ds = ShardDataset(out, "train", verify="fast")
    assert sum(1 for _ in TokenLoader(ds, 16, infinite=False)) == len(ds) // 16

    with pytest.raises(ShardError) as e:
        ShardDataset(out, "train", verify="blocks")
    assert str(e.value) == (f"{shard}: {where} differ from the manifest's block checksums (corrupted shard)")
    with pytest.raises(ShardError, match="sha256 mismatch"):
        ShardDataset(out, "train", verify="full")
    rep = verify_directory(out)
    assert (
        f"{shard}: sha256 mismatch at {where} (block checksums) (corrupted or modified shard)" in rep.problems
    )
    p = run_cli("inspect", str(out), "--verify", check=False)
    assert p.returncode == 1 and where in p.stdout and "Traceback" not in p.stderr
    assert DataConfig().verify == "blocks"  # the trainer's default catches it


def test_a_truncated_shard_names_the_missing_range(shards: Path, tmp_path: Path) -> None:
    out, m = _copy(shards, tmp_path)
    entry = max(m["splits"]["train"]["shards"], key=lambda e: e["bytes"])
    shard = out / entry["file"]
    shard.write_bytes(shard.read_bytes()[: 2 * BLOCK_BYTES + 10])
    with pytest.raises(ShardError, match=f"size {2 * BLOCK_BYTES + 10} != {entry['bytes']}"):
        ShardDataset(out, "train", verify="blocks")
    rep = verify_directory(out)
    # from the last block left to the end the file recorded: the cut block and what is gone
    where = f"bytes {2 * BLOCK_BYTES}-{entry['bytes'] - 1} (block checksums)"
    assert f"{shard}: sha256 mismatch at {where} (corrupted or modified shard)" in rep.problems


def test_a_manifest_without_block_checksums_still_loads(shards: Path, tmp_path: Path) -> None:
    out, m = _copy(shards, tmp_path)
    for split in m["splits"].values():
        for e in split["shards"]:
            del e["block_bytes"], e["block_crc32"]
    (out / "manifest.json").write_text(json.dumps(m))
    n = len(ShardDataset(shards, "train", verify="none"))
    for mode in ("full", "fast", "none"):
        ds = ShardDataset(out, "train", verify=mode)  # type: ignore[arg-type]
        assert len(ds) == n and ds.notices == []
    ds = ShardDataset(out, "train", verify="blocks")
    assert len(ds) == n
    assert len(ds.notices) == 1 and "no block checksums" in ds.notices[0] and "verify=fast" in ds.notices[0]
    # the trainer prints it once for the directory, not once per split
    val = ShardDataset(out, "val", verify="blocks")
    assert verify_notices(RunData(ds, TokenLoader(ds, 4), {"": val})) == ds.notices == val.notices
    rep = verify_directory(out)
    assert rep.ok and rep.without_blocks == rep.checked_shards == sum(
        len(s["shards"]) for s in m["splits"].values()
    )
    got = json.loads(run_cli("inspect", str(out), "--verify", "--json").stdout)["verify"]
    assert got["ok"] and got["shards_without_block_checksums"] == rep.without_blocks

    # blocks falls back to fast: a changed first byte is caught, the middle one is the documented gap
    entry = max(m["splits"]["train"]["shards"], key=lambda e: e["bytes"])
    _flip(out / entry["file"], 0)
    with pytest.raises(ShardError, match="fast checksum mismatch"):
        ShardDataset(out, "train", verify="blocks")
