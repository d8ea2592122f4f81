"""What llmpipe may write into an output directory: its own files, never a stranger's.

A command writes into ``--out`` only when it is new or empty, or holds nothing but what llmpipe wrote
there before (a re-run, a run resumed after a kill). A directory holding anything else is refused with
one line that names some of it, unless ``--overwrite``. llmpipe's files are known by name, and names
that a user's files may also carry (``tokenizer.json``, ``report.html``, ``config.yaml``) count as
llmpipe's only beside the proof of an earlier run (its done marker, work directory or manifest; a
run's checkpoints or metrics). The lock file and llmpipe's temporary files need no proof: a run
killed at once leaves only those.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from llmpipe.errors import LlmpipeError
from llmpipe.lock import LOCK_FILE

#: the temporary name of an output before its rename (``llmpipe.curate.workdir.temp_path``)
TEMP_NAME = re.compile(r"\..+\.tmp-\d+")
#: names shown in the one-line refusal
SHOWN = 5


class ForeignFilesError(LlmpipeError):
    """An output directory holds files llmpipe did not write."""


@dataclass(frozen=True)
class OutputDir:
    """The files one kind of output directory holds, and how an earlier run of that kind is proven."""

    kind: str  # "curate output directory", "run directory"
    names: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]
    proof: Callable[[Path], bool]  # the directory holds an earlier run of this kind

    def _ours(self, name: str) -> bool:
        return name in self.names or any(p.fullmatch(name) for p in self.patterns)

    def foreign(self, directory: Path) -> list[str]:
        """The names in ``directory`` that llmpipe did not write (sorted; none for a new directory)."""
        try:
            names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []
        others = [n for n in names if not self._ours(n)]
        claimed = [n for n in names if self._ours(n) and n != LOCK_FILE and not TEMP_NAME.fullmatch(n)]
        if claimed and not self.proof(directory):
            return sorted(others + claimed)  # named like llmpipe's files, but no run of it wrote them
        return others

    def check(
        self,
        directory: Path,
        overwrite: bool,
        option: str = "--out",
        inputs: Mapping[str, Path | None] | None = None,
    ) -> None:
        """Refuse (one line) to write into ``directory`` when it holds files llmpipe did not write, or
        when it (or a directory above it) is a file, or when it is, holds or lies inside one of
        ``inputs`` (what the command reads, by what the line calls it): never replaced, even with
        ``overwrite``."""
        apart_from_inputs(Path(directory), inputs or {}, option)
        file = file_in_the_way(Path(directory))
        if file is not None:
            kind = (
                "a file"
                if file.is_file()
                else "a link to nothing"
                if not file.exists()
                else "not a directory"
            )
            where = f"is {kind}" if file == Path(directory) else f"{file} is {kind}"
            raise LlmpipeError(
                f"{option} {directory}: {where}, not a directory; name a new or empty {self.kind}"
            )
        found = self.foreign(directory)
        if not found or overwrite:
            return
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        raise ForeignFilesError(
            f"{option} {directory}: holds files llmpipe did not write ({', '.join(found[:SHOWN])}{more}); "
            f"choose a new or empty {self.kind}, or pass --overwrite to write there anyway"
        )


def apart_from_inputs(out: Path, inputs: Mapping[str, Path | None], option: str = "--out") -> None:
    """Refuse (one line, even with ``--overwrite``) an output directory that is, holds or lies inside
    an input the command reads (``{"the run": RUN}``; paths resolved, so a link to it counts): an
    output replaced whole would delete it, and one written into would change what is being read."""
    here = Path(os.path.abspath(out)).resolve()
    for what, path in inputs.items():
        if path is None:
            continue
        there = Path(os.path.abspath(path)).resolve()
        if here == there:
            how = "is"
        elif there.is_relative_to(here):
            how = "holds"
        elif here.is_relative_to(there):
            how = "lies inside"
        else:
            continue
        raise LlmpipeError(
            f"{option} {out}: {how} {what} ({path}) that this command reads; writing there would "
            "delete it (--overwrite does not change that): name another directory"
        )


def file_in_the_way(directory: Path) -> Path | None:
    """``directory``, or the nearest directory above it, when that exists as something other than a
    directory (a file, or a link to one): a directory cannot be made there."""
    for p in (directory, *directory.parents):
        if p.is_dir():
            return None
        if p.exists() or p.is_symlink():
            return p
    return None


@contextlib.contextmanager
def replaced_whole(out: Path) -> Iterator[Path]:
    """An output directory written whole (an export, a quantized or pruned model): yields a new
    directory beside ``out`` (``.NAME.tmp-PID``: a temporary name llmpipe owns) to write into, which
    then replaces ``out`` (checked before: new, llmpipe's, or given up with ``--overwrite``). A failure
    removes it, so neither a partial model nor a changed ``out`` is left behind."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a killed process that had this pid
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
