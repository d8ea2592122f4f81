"""A local lm-evaluation-harness task over text files, for ``lm_eval --include_path``.

    write_task(Path("tasks"), "mytext", [Path("docs.jsonl")])
    HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 lm_eval --model hf --model_args pretrained=HF_DIR \\
        --include_path tasks --tasks mytext

The task is a ``loglikelihood_rolling`` one like lm-eval's wikitext: every document scored whole, word
and byte perplexity and bits per byte. Data is read by the ``json`` dataset builder from local files, so
nothing is fetched from the hub. Text files are converted to one JSONL next to the task (one document
per file); JSONL files are used as they are (their ``text`` field).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import yaml

from llmpipe.errors import ConfigError
from llmpipe.eval.inputs import read_texts


def write_task(task_dir: Path, name: str, files: Sequence[Path], *, field: str = "text") -> Path:
    """Write ``task_dir/name.yaml`` (and ``task_dir/name.jsonl`` holding the documents); returns the YAML."""
    if not name.replace("_", "").isalnum():
        raise ConfigError(f"task name {name!r}: use letters, digits and underscores")
    task_dir.mkdir(parents=True, exist_ok=True)
    data = task_dir / f"{name}.jsonl"
    with open(data, "w", encoding="utf-8") as f:
        for path in files:
            for text in read_texts(path, field=field):
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    task = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data.resolve())}},
        "test_split": "test",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "text",
        "should_decontaminate": False,
        "metric_list": [{"metric": m} for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")],
        "metadata": {"version": 1.0},
    }
    out = task_dir / f"{name}.yaml"
    out.write_text(yaml.safe_dump(task, sort_keys=False), encoding="utf-8")
    return out
