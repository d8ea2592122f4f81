"""The optional parts of llmpipe (pip extras) and the one line a user sees when one is missing.

The core install curates (read, filter, dedup, tokenize, pack, inspect, report, plan). Training,
evaluation, compression, Ray, object storage and sweeps are extras: ``pip install 'llmpipe[train]'``.
pyproject.toml declares the same names; ``tools/check_deps.py`` checks every import against it."""

from __future__ import annotations

#: the extra that provides each optional top-level module llmpipe imports
EXTRA_OF_MODULE = {
    "torch": "train",
    "safetensors": "train",
    "tokenizers": "train",
    "tensorboard": "train",
    "huggingface_hub": "train",
    "torchao": "train",
    "transformers": "eval",
    "sklearn": "classify",
    "compressed_tensors": "compress",
    "gguf": "compress",
    "ray": "ray",
    "s3fs": "s3",
    "optuna": "tune",
    "scipy": "tune",
    "matplotlib": "tune",
}

#: the extra each command needs beyond the core (a command not listed needs none)
EXTRA_OF_COMMAND = {
    "export": "train",
    "eval": "eval",
    "quantize": "compress",
    "prune": "compress",
    "ablate": "eval",
    "sweep": "tune",
    "scaling": "tune",
}


#: the extras each extra installs too (pyproject.toml: ``compress = ["llmpipe[train]", ...]``)
INCLUDES = {
    "eval": {"train"},
    "compress": {"train"},
    "classify": {"eval", "train"},
    "tune": {"train", "ray"},
}


def missing_extra(error: ModuleNotFoundError, command: str | None = None) -> str | None:
    """One line naming the extra to install, or None when ``error`` is not a missing optional package
    (a module of llmpipe itself, or one no extra provides: a real bug, left to surface)."""
    top = (error.name or "").split(".")[0]
    if not top or top == "llmpipe":
        return None
    extra = EXTRA_OF_MODULE.get(top) or (EXTRA_OF_COMMAND.get(command or "") if command else None)
    own = EXTRA_OF_COMMAND.get(command or "")
    if own is not None and extra in INCLUDES.get(own, ()):
        extra = own  # quantize without torch: 'compress', which brings torch and what quantize needs beside
    if extra is None:
        return None
    what = f"llmpipe {command}" if command else "this"
    return f"{what} needs the '{extra}' extra ({top} is not installed): pip install 'llmpipe[{extra}]'"


def run_main(module: str) -> int:
    """``module.main()`` for an entry script (``-m llmpipe.train``, train/pretrain.py): a missing extra is
    one line on stderr and exit code 2, not an import traceback."""
    import importlib
    import sys

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        line = missing_extra(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    return int(mod.main())
