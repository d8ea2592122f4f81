"""What the trainer and ``llmpipe export`` write into their ``--out`` (``llmpipe.outdir``): a directory
of a user's files is refused, an earlier run or export of llmpipe's is written into. Imports no torch,
so the commands refuse before they load it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from llmpipe.lock import LOCK_FILE
from llmpipe.outdir import OutputDir


def _earlier_run(out: Path) -> bool:
    """``out`` holds a trainer run (checkpoints, metrics, a sweep trial's launches or the log a sweep
    trial or ablation proxy opens before the trainer starts, or a saved run config). The trainer never
    deletes or rewrites a log it finds."""
    if any((out / n).exists() for n in ("checkpoints", "metrics.jsonl", "launches.jsonl", "train.log")):
        return True
    try:
        saved = yaml.safe_load((out / "config.yaml").read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(saved, dict) and {"model", "train", "optim", "data"} <= saved.keys()


#: what a run writes into its directory (``launches.jsonl``, ``train.log``: a sweep trial's; ``result.json``:
#: an ablation proxy's), so a resumed run or a sweep trial finds only these
RUN_DIR = OutputDir(
    "run directory",
    frozenset(
        {
            "config.yaml",
            "metrics.jsonl",
            "tensorboard",
            "checkpoints",
            "grads",
            LOCK_FILE,
            "launches.jsonl",
            "train.log",
            "result.json",
        }
    ),
    (),
    _earlier_run,
)


EXPORT_MARKER = "llmpipe_export.json"
#: the files of an HF model directory as llmpipe writes them (export, quantize, prune)
HF_MODEL_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "model.safetensors",
        EXPORT_MARKER,
    }
)
#: what an export writes (the directory is replaced whole): a re-export replaces only an earlier export
EXPORT_OUT = OutputDir(
    "model directory",
    HF_MODEL_FILES
    | {
        "model.safetensors.index.json",
        "adapter_config.json",  # a LoRA run's PEFT adapter directory
        "adapter_model.safetensors",
    },
    (re.compile(r"model-\d+-of-\d+\.safetensors"),),
    lambda d: (d / EXPORT_MARKER).is_file(),
)


COMPRESS_REPORT = "compression_report.json"
#: what ``llmpipe quantize`` and ``llmpipe prune`` write (the directory is replaced whole): an earlier
#: output of theirs carries their report
COMPRESSED_OUT = OutputDir(
    "model directory",
    HF_MODEL_FILES
    | {
        "model.gguf",
        "quantized.safetensors",
        "quantization.json",
        "masks.safetensors",
        COMPRESS_REPORT,
        "compression_report.txt",
    },
    (),
    lambda d: (d / COMPRESS_REPORT).is_file(),
)
