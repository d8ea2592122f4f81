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
from llmpipe.io.fs import InputPath, RemotePath, filesystem, is_url, local_or_url, store_call

IGNORED_SUFFIXES = (".crc", ".tmp", ".lock")
#: a directory holding one of these is an llmpipe output directory (curate's --out)
OUTPUT_MARKERS = (".llmpipe-done.json", ".llmpipe-work", ".llmpipe.lock")


@dataclass
class Discovery:
    files: list[InputPath]
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


def discover(inputs: list[str], exclude: list[Path | str] | None = None) -> list[InputPath]:
    """Expand and sort; a missing path or a directory with no files is a clear error."""
    return discover_inputs(inputs, exclude).files


def input_order(f: InputPath) -> tuple[int, list[str]]:
    """Files sort by their path components (``Path`` order), local ones first; a tree of files gets
    the same order on a store as on a disk."""
    return (1, f.path.split("/")) if isinstance(f, RemotePath) else (0, list(f.parts))


def discover_inputs(inputs: list[str], exclude: list[Path | str] | None = None) -> Discovery:
    if not inputs:
        raise InputError("no input given")
    local_exclude = [e for e in exclude or [] if not is_url(e)]
    walker = _Walker([Path(os.path.realpath(e)) for e in local_exclude])
    remote = _RemoteWalker([str(e) for e in exclude or [] if is_url(e)])
    for arg in inputs:
        if is_url(arg):
            remote.add_arg(arg)
            continue
        arg = local_or_url(arg)
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
    files: list[InputPath] = [*walker.files, *remote.files]
    if not files:
        raise InputError("the inputs hold no files")
    return Discovery(
        sorted(files, key=input_order), walker.skipped + remote.skipped, walker.excluded + remote.excluded
    )


class _RemoteWalker:
    """Discovery on an fsspec file system: a URL names an object, a prefix (walked) or a glob pattern.
    Hidden names, llmpipe's temporary files and output prefixes are left out as on a disk."""

    def __init__(self, exclude: list[str]) -> None:
        self.exclude = [e.rstrip("/") for e in exclude]
        self.files: set[RemotePath] = set()
        self.skipped: list[str] = []
        self.excluded: list[str] = []

    def add_arg(self, arg: str) -> None:
        fs, path = filesystem(arg)
        if any(ch in path for ch in "*?["):
            found = store_call(arg, "list it", lambda: fs.glob(path, detail=True))
            if not found:
                raise InputError(f"{arg}: the pattern matches no file")
            for name, info in sorted(found.items()):
                if info.get("type") == "directory":
                    self._walk(fs, name, fs.unstrip_protocol(name))
                else:
                    self._add(fs.unstrip_protocol(name), info)
            return
        try:
            info = store_call(arg, "read it", lambda: fs.info(path))
        except FileNotFoundError as e:
            why = str(e).strip()
            detail = f" ({why})" if why and why.rstrip("/") != path.rstrip("/") else ""
            raise InputError(f"{arg}: no such file or directory{detail}") from None
        if info.get("type") == "directory":
            before = len(self.files)
            self._walk(fs, path, arg)
            if len(self.files) == before:
                why = "; ".join(self.skipped + self.excluded)
                raise InputError(f"{arg}: the directory holds no input files" + (f" ({why})" if why else ""))
        else:
            self._add(arg, info)

    def _is_excluded(self, url: str) -> bool:
        return any(url == e or url.startswith(e + "/") for e in self.exclude)

    def _add(self, url: str, info: dict[str, object]) -> None:
        if self._is_excluded(url):
            self.excluded.append(f"{url}: the output directory is not an input")
        else:
            self.files.add(RemotePath(url, dict(info)))

    def _walk(self, fs: object, path: str, shown: str) -> None:
        url = shown.rstrip("/")
        if self._is_excluded(url):
            self.excluded.append(f"{url}: the output directory is not an input")
            return
        found: dict[str, dict[str, object]] = store_call(
            shown,
            "list it",
            lambda: fs.find(path, detail=True),  # type: ignore[attr-defined]
        )
        root = path.rstrip("/")
        names = {name[len(root) + 1 :]: info for name, info in found.items() if name.startswith(root + "/")}
        by_dir: dict[str, set[str]] = {}
        for rel in names:
            d, _, base = rel.rpartition("/")
            by_dir.setdefault(d, set()).add(base)
        outputs = sorted(
            d
            for d, files in by_dir.items()
            if files.intersection(OUTPUT_MARKERS) or {"manifest.json", "tokenizer.json"} <= files
        )
        for d in outputs:
            self.excluded.append(f"{url}/{d}".rstrip("/") + ": an llmpipe output directory is not an input")
        for rel, info in sorted(names.items()):
            parts = rel.split("/")
            if any(_Walker._skip_name(x) for x in parts):
                continue
            if any(rel == d or rel.startswith(d + "/") or d == "" for d in outputs):
                continue
            self._add(f"{url}/{rel}", info)


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
