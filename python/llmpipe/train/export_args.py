"""The export's command-line arguments, shared by ``llmpipe export`` and ``python -m llmpipe.train.export_hf``
(building the parser imports no torch)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN", help="run directory of the trainer")
    p.add_argument("--out", type=Path, required=True, help="HF model directory to write")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out even when it holds files llmpipe did not write (they are deleted)",
    )
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json (default: the shards')")
    p.add_argument(
        "--max-shard-size",
        default=None,
        metavar="SIZE",
        help="split the weights into safetensors shards of at most SIZE (5GB, 500MB) with an index",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="a LoRA run: write the base with the adapters merged in (default: a PEFT adapter directory)",
    )


def export_inputs(run_dir: Path, tokenizer: Path | None) -> dict[str, Path | None]:
    """What an export reads, which its --out (replaced whole) must not be, hold or lie inside."""
    return {"the run": run_dir, "--tokenizer": tokenizer}
