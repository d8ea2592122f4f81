"""Turn the INPUT arguments (files, directories, globs) into a sorted list of input files.

Every file is resolved to its real path once, so an input named twice (``dir`` and ``dir/a.jsonl``,
``dir/../dir``, a symlink and its target) is read once. Directories are walked each real directory
once (no loops). A symlink found inside an input directory, or matched by a glob, is followed only
when its target lies inside the named inputs (``follow_symlinks``: always): a link to ``/etc/shadow``
in a crawl directory is not read. A glob names the directory it starts from (``crawl/*.txt``:
``crawl``), so its matches are held to that directory as a walk of it would be. A file or directory
whose name is not valid UTF-8 is listed and not read (its name could not be recorded). Output
directories of llmpipe (``--out``, or any directory that holds a curate run's marker, work directory
or shards) are never inputs. Nothing is left out silently: what cannot or
must not be read (unreadable, a broken symlink, a symlink out of the inputs, a FIFO, device or
socket) is listed in ``Discovery.skipped``, hidden and temporary names in ``Discovery.ignored``. A
FIFO or device named as an input (or matched by a glob) is an error; none is ever opened.
"""

from __future__ import annotations

import glob
import os
import stat
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
    #: "<path>: <why>" for each hidden or temporary name left out by design (listed, not a problem)
    ignored: list[str] = field(default_factory=list)


def special_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a directory is (None for those two)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def printable(p: Path | str) -> str:
    """A path as text that can be printed and written to JSON: bytes of a name that are not UTF-8
    (decoded by Python as lone surrogates) as ``\\xNN``."""
    return os.fsencode(str(p)).decode("utf-8", "backslashreplace")


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _glob_base(pattern: str) -> Path:
    """The directory a glob pattern starts from: its components before the first one with a wildcard."""
    parts = Path(pattern).parts
    k = next((i for i, x in enumerate(parts) if any(ch in x for ch in "*?[")), len(parts))
    return Path(*parts[:k]) if k else Path(".")


def _check_named(arg: str, p: Path) -> None:
    """A FIFO, device or socket named as an input (or matched by a glob) is an error: never opened."""
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return  # missing or unreadable: said where the file is used
    kind = special_kind(mode)
    if kind is not None:
        via = "" if str(p) == arg else f" (matched by {arg})"
        raise InputError(f"{p}{via}: {kind}, not a file; inputs are files or directories")


def is_output_dir(d: Path) -> bool:
    """A curate output directory: its marker, work dir or lock, or a manifest beside its tokenizer."""
    try:
        names = set(os.listdir(d))
    except OSError:
        return False
    return bool(names.intersection(OUTPUT_MARKERS)) or {"manifest.json", "tokenizer.json"} <= names


def discover(
    inputs: list[str], exclude: list[Path | str] | None = None, follow_symlinks: bool = False
) -> list[InputPath]:
    """Expand and sort; a missing path or a directory with no files is a clear error."""
    return discover_inputs(inputs, exclude, follow_symlinks).files


def input_order(f: InputPath) -> tuple[int, list[str]]:
    """Files sort by their path components (``Path`` order), local ones first; a tree of files gets
    the same order on a store as on a disk."""
    return (1, f.path.split("/")) if isinstance(f, RemotePath) else (0, list(f.parts))


def discover_inputs(
    inputs: list[str], exclude: list[Path | str] | None = None, follow_symlinks: bool = False
) -> Discovery:
    """``follow_symlinks``: follow symlinks inside input directories wherever they lead (default: only
    to targets inside the named inputs; the others are skipped and listed)."""
    if not inputs:
        raise InputError("no input given")
    local_exclude = [e for e in exclude or [] if not is_url(e)]
    remote = _RemoteWalker([str(e) for e in exclude or [] if is_url(e)])
    named: list[tuple[str, Path, Path | None]] = []  # (argument, path, a glob's directory)
    for arg in inputs:
        if is_url(arg):
            remote.add_arg(arg)
            continue
        arg = local_or_url(arg)
        if not _utf8(arg):
            raise InputError(f"{printable(arg)}: the name is not valid UTF-8; rename it to read it")
        if any(ch in arg for ch in "*?["):
            matches = [Path(m) for m in glob.glob(arg, recursive=True)]
            if not matches:
                raise InputError(f"{arg}: the pattern matches no file")
            start = _glob_base(arg)
            for m in matches:
                _check_named(arg, m)
                named.append((arg, m, start))
            continue
        p = Path(arg)
        if not p.exists():
            raise InputError(f"{arg}: no such file or directory")
        _check_named(arg, p)
        named.append((arg, p, None))
    roots = [Path(os.path.realpath(p if d is None else d)) for _, p, d in named]
    walker = _Walker([Path(os.path.realpath(e)) for e in local_exclude], roots, follow_symlinks)
    for arg, p, glob_dir in named:
        if glob_dir is not None:
            walker.add_match(p)
            continue
        if p.is_dir() and not walker.add(p):
            why = "; ".join(walker.skipped + walker.ignored + walker.excluded)
            raise InputError(f"{arg}: the directory holds no input files" + (f" ({why})" if why else ""))
        if p.is_file():
            try:
                open(p, "rb").close()
            except OSError as e:
                raise InputError(f"{arg}: cannot read the file ({e.strerror or e})") from None
            walker.add(p)
    files: list[InputPath] = [*walker.files, *remote.files]
    if not files:
        why = "; ".join(walker.skipped + walker.excluded + remote.skipped + remote.excluded)
        raise InputError("the inputs hold no files" + (f" ({why})" if why else ""))
    return Discovery(
        sorted(files, key=input_order),
        walker.skipped + remote.skipped,
        walker.excluded + remote.excluded,
        walker.ignored + remote.ignored,
    )


class _RemoteWalker:
    """Discovery on an fsspec file system: a URL names an object, a prefix (walked) or a glob pattern.
    Hidden names, llmpipe's temporary files and output prefixes are left out as on a disk."""

    def __init__(self, exclude: list[str]) -> None:
        self.exclude = [e.rstrip("/") for e in exclude]
        self.files: set[RemotePath] = set()
        self.skipped: list[str] = []
        self.excluded: list[str] = []
        self.ignored: list[str] = []

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
            hidden = next((k for k, x in enumerate(parts) if _Walker._skip_name(x)), None)
            if hidden is not None:
                name = f"{url}/{'/'.join(parts[: hidden + 1])}: {_Walker._skip_name(parts[hidden])}"
                if name not in self.ignored:
                    self.ignored.append(name)
                continue
            if any(rel == d or rel.startswith(d + "/") or d == "" for d in outputs):
                continue
            self._add(f"{url}/{rel}", info)


class _Walker:
    def __init__(self, exclude: list[Path], roots: list[Path], follow_symlinks: bool) -> None:
        self.exclude = exclude
        self.roots = roots  # the named inputs, real paths
        self.follow = follow_symlinks
        self.files: set[Path] = set()
        self.skipped: list[str] = []
        self.excluded: list[str] = []
        self.ignored: list[str] = []
        self.seen_dirs: set[tuple[int, int]] = set()

    def _excluded(self, real: Path) -> bool:
        return any(real == e or e in real.parents for e in self.exclude)

    def _inside(self, real: Path) -> bool:
        return any(real == r or r in real.parents for r in self.roots)

    def add_match(self, p: Path) -> None:
        """A glob's match: added like an entry of the directory the glob starts from (one whose name
        is not UTF-8, or a symlink out of the inputs, is listed instead)."""
        if not _utf8(str(p)):
            self.skipped.append(f"{printable(p)}: the name is not valid UTF-8 (rename it to read it)")
            return
        real = Path(os.path.realpath(p))
        if not self.follow and not self._inside(real):
            self.skipped.append(f"{p}: a symlink to {real}, outside the inputs (--follow-symlinks reads it)")
            return
        self.add(p)

    def add(self, p: Path) -> bool:
        """Add ``p`` (a file, or a directory walked); False: a directory that gave no file."""
        real = Path(os.path.realpath(p))
        if real.is_file():
            if not self._excluded(real):
                self.files.add(real)
            return True
        if not real.is_dir():
            if p.is_symlink() and not real.exists():
                self.skipped.append(f"{p}: a broken symlink")
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
    def _skip_name(name: str) -> str | None:
        """Why a name is left out by design (hidden, a temporary or lock file), else None."""
        if name.startswith("."):
            return "a hidden name, not read"
        suffix = next((x for x in IGNORED_SUFFIXES if name.endswith(x)), None)
        return None if suffix is None else f"a {suffix} file (temporary, lock or checksum), not read"

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
            self._entry(entry, shown / entry.name)

    def _entry(self, entry: os.DirEntry[str], shown: Path) -> None:
        """One directory entry: walked, added, or listed with why not (never opened unless a file)."""
        if not _utf8(entry.name):
            self.skipped.append(f"{printable(shown)}: the name is not valid UTF-8 (rename it to read it)")
            return
        why = self._skip_name(entry.name)
        if why is not None:
            self.ignored.append(f"{shown}: {why}")
            return
        link = entry.is_symlink()
        child = Path(os.path.realpath(entry.path))
        try:
            mode = os.stat(entry.path).st_mode  # follows a symlink
        except FileNotFoundError:
            self.skipped.append(f"{shown}: a broken symlink" if link else f"{shown}: vanished")
            return
        except OSError as e:
            self.skipped.append(f"{shown}: {e.strerror or e}")
            return
        kind = special_kind(mode)
        if kind is not None:
            self.skipped.append(f"{shown}: " + (f"a symlink to {kind} ({child})" if link else kind))
            return
        if link and not self.follow and not self._inside(child):
            self.skipped.append(
                f"{shown}: a symlink to {child}, outside the inputs (--follow-symlinks reads it)"
            )
            return
        if self._excluded(child):
            self.excluded.append(f"{shown}: the output directory is not an input")
            return
        if stat.S_ISDIR(mode):
            self._walk(child, shown)
            return
        try:
            open(child, "rb").close()
        except OSError as e:
            self.skipped.append(f"{shown}: unreadable file ({e.strerror or e})")
            return
        self.files.add(child)
