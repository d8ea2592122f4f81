"""Turn the INPUT arguments (files, directories, globs) into a sorted list of input files."""

from __future__ import annotations

import glob
from pathlib import Path

from llmpipe.errors import InputError

IGNORED_SUFFIXES = (".crc", ".tmp", ".lock")


def discover(inputs: list[str]) -> list[Path]:
    """Expand and sort; a missing path or a directory with no files is a clear error."""
    if not inputs:
        raise InputError("no input given")
    files: set[Path] = set()
    for arg in inputs:
        if any(ch in arg for ch in "*?["):
            matches = [Path(m) for m in glob.glob(arg, recursive=True)]
            if not matches:
                raise InputError(f"{arg}: the pattern matches no file")
            for m in matches:
                files.update(_walk(m))
            continue
        p = Path(arg)
        if not p.exists():
            raise InputError(f"{arg}: no such file or directory")
        found = _walk(p)
        if p.is_dir() and not found:
            raise InputError(f"{arg}: the directory holds no input files")
        files.update(found)
    if not files:
        raise InputError("the inputs hold no files")
    return sorted(f.resolve() for f in files)


def _walk(p: Path) -> list[Path]:
    if p.is_file():
        return [p]
    if p.is_dir():
        return [
            f
            for f in sorted(p.rglob("*"))
            if f.is_file()
            and not any(part.startswith(".") for part in f.relative_to(p).parts)
            and not f.name.endswith(IGNORED_SUFFIXES)
        ]
    return []
