"""Typed configs: unknown keys and wrong types are errors that name the key; numbers as users write them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from llmpipe.config import from_dict, load_yaml
from llmpipe.errors import ConfigError


@dataclass
class Inner:
    lr: float = 0.1
    steps: int = 10


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    name: str = "x"


def test_scientific_notation_without_a_dot_is_a_number(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("inner:\n  lr: 1e-3\n  steps: 5\n")  # YAML 1.1 reads 1e-3 as the string '1e-3'
    cfg = from_dict(Outer, load_yaml(p))
    assert cfg.inner.lr == pytest.approx(1e-3) and cfg.inner.steps == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("inner:\n  lrr: 1\n", "config.inner: unknown key(s) ['lrr']"),
        ("inner:\n  lr: fast\n", "config.inner.lr: expected a number, got 'fast'"),
        ("inner:\n  steps: 1.5\n", "config.inner.steps: expected an integer"),
        ("inner:\n  steps: 1e3\n", "config.inner.steps: expected an integer"),
        ("name: [1]\n", "config.name: expected a string"),
    ],
)
def test_bad_values_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_dict(Outer, yaml.safe_load(text))
