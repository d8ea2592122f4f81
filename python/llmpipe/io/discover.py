"""Turn the INPUT arguments (files, directories, globs) into a sorted list of input files.

Every file is resolved to its real path once, so an input named twice (``dir`` and ``dir/a.jsonl``,
``dir/../dir``, a symlink and its target) is read once. Directories are walked following symlinks,
each real directory once (no loops). Output directories of llmpipe (``--out``, or any directory that
holds a curate run's marker, work directory or shards) are never inputs. What cannot be read is not
dropped silently: it is listed in ``Discovery.skipped`` for the caller to report.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

from llmpipe.errors import InputError

IGNORED_SUFFIXES = (".crc", ".tmp", ".lock")
#: a directory holding one of these is an llmpipe output directory (curate's --out)
OUTPUT_MARKERS = (".llmpipe-done.json", ".llmpipe-work", ".llmpipe.lock")


@dataclass
class Discovery:
    files: list[Path]
    #: "<path>: <why>" for each directory or file that could not be read (a problem to report)
    skipped: list[str] = field(default_factory=list)
    #: "<path>: <why>" for each output directory left out by design
    excluded: list[str] = field(default_factory=list)


def is_output_dir(d: Path) -> bool:
    """A curate output directory: its marker, work dir or lock, or a manifest beside its tokenizer."""
    try:
        names = set(os.listdir(d))
    except OSError:
        return False
    return bool(names.intersection(OUTPUT_MARKERS)) or {"manifest.json", "tokenizer.json"} <= names


def discover(inputs: list[str], exclude: list[Path] | None = None) -> list[Path]:
    """Expand and sort; a missing path or a directory with no files is a clear error."""
    return discover_inputs(inputs, exclude).files


def discover_inputs(inputs: list[str], exclude: list[Path] | None = None) -> Discovery:
    if not inputs:
        raise InputError("no input given")
    walker = _Walker([Path(os.path.realpath(e)) for e in exclude or []])
    for arg in inputs:
        if any(ch in arg for ch in "*?["):
            matches = [Path(m) for m in glob.glob(arg, recursive=True)]
            if not matches:
                raise InputError(f"{arg}: the pattern matches no file")
            for m in matches:
                walker.add(m)
            continue
        p = Path(arg)
        if not p.exists():
            raise InputError(f"{arg}: no such file or directory")
        if p.is_dir() and not walker.add(p):
            why = "; ".join(walker.skipped + walker.excluded)
            raise InputError(f"{arg}: the directory holds no input files" + (f" ({why})" if why else ""))
        if p.is_file():
            try:
                open(p, "rb").close()
            except OSError as e:
                raise InputError(f"{arg}: cannot read the file ({e.strerror or e})") from None
            walker.add(p)
    if not walker.files:
        raise InputError("the inputs hold no files")
    return Discovery(sorted(walker.files), walker.skipped, walker.excluded)


class _Walker:
    def __init__(self, exclude: list[Path]) -> None:
        self.exclude = exclude
        self.files: set[Path] = set()
        self.skipped: list[str] = []
        self.excluded: list[str] = []
        self.seen_dirs: set[tuple[int, int]] = set()

    def _excluded(self, real: Path) -> bool:
        return any(real == e or e in real.parents for e in self.exclude)

    def add(self, p: Path) -> bool:
        """Add ``p`` (a file, or a directory walked); False: a directory that gave no file."""
        real = Path(os.path.realpath(p))
        if real.is_file():
            if not self._excluded(real):
                self.files.add(real)
            return True
        if not real.is_dir():
            return True
        if self._excluded(real):
            self.excluded.append(f"{p}: the output directory is not an input")
            return False
        try:
            st = real.stat()
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) in self.seen_dirs:
            return True  # named twice, or inside a directory already walked
        before = len(self.files)
        self._walk(real, p)
        return len(self.files) > before

    @staticmethod
    def _skip_name(name: str) -> bool:
        return name.startswith(".") or name.endswith(IGNORED_SUFFIXES)

    def _walk(self, real: Path, shown: Path) -> None:
        try:
            st = real.stat()
        except OSError as e:
            self.skipped.append(f"{shown}: {e.strerror or e}")
            return
        if (st.st_dev, st.st_ino) in self.seen_dirs:
            return  # a symlink loop, or a directory reached twice
        self.seen_dirs.add((st.st_dev, st.st_ino))
        if is_output_dir(real):
            self.excluded.append(f"{shown}: an llmpipe output directory is not an input")
            return
        try:
            entries = sorted(os.scandir(real), key=lambda e: e.name)
        except OSError as e:
            self.skipped.append(f"{shown}: unreadable directory ({e.strerror or e})")
            return
        for entry in entries:
            if self._skip_name(entry.name):
                continue
            child = Path(os.path.realpath(entry.path))
            if self._excluded(child):
                self.excluded.append(f"{shown / entry.name}: the output directory is not an input")
                continue
            try:
                is_dir = entry.is_dir()  # follows symlinks
                is_file = not is_dir and entry.is_file()
            except OSError as e:
                self.skipped.append(f"{shown / entry.name}: {e.strerror or e}")
                continue
            if is_dir:
                self._walk(child, shown / entry.name)
            elif is_file:
                try:
                    open(child, "rb").close()
                except OSError as e:
                    self.skipped.append(f"{shown / entry.name}: unreadable file ({e.strerror or e})")
                    continue
                self.files.add(child)
            elif entry.is_symlink():
                self.skipped.append(f"{shown / entry.name}: a broken symlink")
