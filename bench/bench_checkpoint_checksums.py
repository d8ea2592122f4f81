"""What the checkpoint checksums cost: a DCP save with llmpipe's ChecksummingWriter (each file's 1 MiB
block CRC-32s, read back while in the page cache, plus checksums.json) against DCP's own FileSystemWriter,
on the same state in the same run, and the check at load (``damage``) against the size-only check.

    python bench/bench_checkpoint_checksums.py [--mib 256] [--repeats 5]

States: the tiny config's model and AdamW state (configs/train/tiny.yaml with the byte shards' vocab of
257) and a synthetic one of --mib MiB of fp32 tensors. Best of --repeats per writer, alternating (the
least disturbed by other work on a shared machine). Prints milliseconds and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from llmpipe.train.checkpoint import ChecksummingWriter, SafeFileSystemReader, _size_problem, damage
from llmpipe.train.model import ModelConfig, Transformer


def tiny_state() -> dict[str, Any]:
    model = Transformer(ModelConfig(dim=64, n_layers=2, n_heads=4, vocab_size=257, max_seq_len=256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.zeros(1, 8, dtype=torch.long)).float().sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def big_state(mib: int) -> dict[str, Any]:
    n = mib * (1 << 20) // 4 // 16
    return {"model": {f"w{i}": torch.randn(n) for i in range(16)}}


def save(state: dict[str, Any], path: Path, checksums: bool) -> float:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    torch.save({"step": 1, "checksums": "checksums.json"}, path / "train_state.pt")
    writer = ChecksummingWriter(str(path)) if checksums else dcp.FileSystemWriter(str(path))
    t = time.perf_counter()
    dcp.save(state, checkpoint_id=str(path), storage_writer=writer, no_dist=True)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        for name, state in (("tiny config", tiny_state()), (f"{args.mib} MiB", big_state(args.mib))):
            base, ours = Path(tmp) / "dcp", Path(tmp) / "ours"
            save(state, base, False)  # warm-up
            plain = summed = float("inf")
            for _ in range(args.repeats):
                plain = min(plain, save(state, base, False))
                summed = min(summed, save(state, ours, True))
            sizes, full = check_times(ours, args.repeats)
            mb = sum(f.stat().st_size for f in ours.iterdir()) / 1e6
            print(
                f"{name} ({mb:.1f} MB): save {plain * 1e3:.1f} ms with DCP's writer, {summed * 1e3:.1f} ms "
                f"with checksums (x{summed / plain:.2f}); check at load {full * 1e3:.1f} ms "
                f"(size check alone {sizes * 1e3:.2f} ms)"
            )


def check_times(path: Path, repeats: int) -> tuple[float, float]:
    """Best time of the size-only check and of the whole check (sizes, train state, checksums)."""
    meta = SafeFileSystemReader(str(path)).read_metadata()
    sizes = full = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        assert _size_problem(path, meta) is None
        sizes = min(sizes, time.perf_counter() - t)
        t = time.perf_counter()
        assert damage(path) is None
        full = min(full, time.perf_counter() - t)
    return sizes, full


if __name__ == "__main__":
    main()
