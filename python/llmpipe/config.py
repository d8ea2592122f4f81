"""Typed configuration: dataclasses filled from YAML/dicts with unknown keys and wrong types rejected."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml

from llmpipe.errors import ConfigError

T = TypeVar("T")

_YAML11_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _check(value: Any, tp: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        errors = []
        for arm in get_args(tp):
            if arm is type(None) and value is None:
                return None
            if arm is type(None):
                continue
            try:
                return _check(value, arm, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{where}: {value!r} does not match {tp}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        args = get_args(tp)
        if origin is tuple and len(args) > 1 and args[1] is not Ellipsis:  # a fixed shape: (n, fraction)
            if len(value) != len(args):
                raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)} ({value!r})")
            return tuple(
                _check(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True))
            )
        (arm, *_) = args or (Any,)
        items = [_check(v, arm, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, where)  # type: ignore[arg-type]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _YAML11_FLOAT.fullmatch(value.strip()):
            return float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string; it is a number to a user
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if tp is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{where}: expected a path, got {value!r}")
        return Path(value)
    if typing.get_origin(tp) is typing.Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {list(get_args(tp))}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types are a ConfigError."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(cls)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(names)}")
    kwargs = {k: _check(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def packaged_configs(kind: str) -> list[str]:
    """Names of the configs of ``kind`` (``train``, ``curate``) that ship inside the package."""
    folder = resources.files("llmpipe") / "configs" / kind
    return sorted(f.name.removesuffix(".yaml") for f in folder.iterdir() if f.name.endswith(".yaml"))


def config_file(value: str | Path, kind: str) -> Path:
    """A config file by its path, or by the name of one that ships with llmpipe: ``tiny``, ``tiny.yaml``
    or ``configs/train/tiny.yaml`` (the checkout's path, which works from any directory)."""
    p = Path(value)
    if p.is_file():
        return p
    parts = p.parts
    if len(parts) == 1 or parts[-3:-1] == ("configs", kind):
        stem = p.name.removesuffix(".yaml").removesuffix(".yml")
        if stem in packaged_configs(kind):
            return Path(str(resources.files("llmpipe") / "configs" / kind / f"{stem}.yaml"))
    raise ConfigError(
        f"config file {p} does not exist (the {kind} configs that ship with llmpipe: "
        f"{', '.join(packaged_configs(kind))})"
    )


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML parser's error as the tail of one line: where (line and column, 1-based) and what."""
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = " ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
    return f"{where}: {what or str(e).splitlines()[0]}"


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML{yaml_problem(e)}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping")
    return data


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain JSON-able data (paths as strings)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj
