"""Per-language settings of the heuristic filters: one YAML per language (``fra_Latn.yaml``).

Each file holds sections named after the filter stages (``gopher_quality``, ``gopher_repetition``,
``fineweb``) with the keys of that filter to change (stop words, thresholds); the rest comes from
the run's configuration, so English (no file) keeps the run's settings. A document uses the file of
its detected language (the ``lang`` column of the language stage): ``fra_Latn.yaml``, else
``fra.yaml``. The built-in files live in ``lang_settings/``; a directory given in the stage's
``language_settings`` adds files or replaces built-in ones of the same name.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from llmpipe import langcodes
from llmpipe.config import load_yaml
from llmpipe.errors import ConfigError

BUILTIN = Path(__file__).parent / "lang_settings"
SECTIONS = ("gopher_repetition", "gopher_quality", "fineweb")


def load(extra_dir: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """language code -> filter section -> overrides, from the built-in files and ``extra_dir``."""
    files = {p.stem: p for p in sorted(BUILTIN.glob("*.yaml"))}
    if extra_dir is not None:
        d = Path(extra_dir)
        if not d.is_dir():
            raise ConfigError(f"language_settings: {d} is not a directory")
        files.update({p.stem: p for p in sorted(d.glob("*.yaml"))})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for code, path in files.items():
        if path.parent == BUILTIN:  # checked when parsed (once per process); a copy, callers may change it
            out[code] = copy.deepcopy(_builtin()[code])
            continue
        try:
            langcodes.check(code, str(path))
        except ValueError as e:
            raise ConfigError(f"{e} (name the file after the language, e.g. fra_Latn.yaml)") from None
        data = load_yaml(path)
        _check(path, data)
        out[code] = data
    return out


@functools.cache
def _builtin() -> dict[str, dict[str, dict[str, Any]]]:
    """The built-in files, parsed with libyaml where PyYAML has it: three filters each read all of
    them, and the pure-Python parser made that ~0.05 CPU-s of every curate run's start."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = {}
    for path in sorted(BUILTIN.glob("*.yaml")):
        data = yaml.load(path.read_text(), Loader=loader) or {}
        _check(path, data)
        out[path.stem] = data
    return out


def _check(path: Path, data: dict[str, Any]) -> None:
    """Sections the filters know, each a mapping (``load_yaml`` checked the top level)."""
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {unknown}; known: {list(SECTIONS)}")
    for name, section in data.items():
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: {name} must be a mapping of options")


def lookup(table: dict[str, Any], lang: str) -> Any:
    """The entry for ``lang`` (``fra_Latn``): exact, else by language alone (``fra``), else None."""
    hit = table.get(lang)
    return hit if hit is not None else table.get(lang.partition("_")[0])
