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


def test_default_yaml_writes_out_every_key_of_the_code_defaults() -> None:
    """configs/curate/default.yaml says it is what an empty config means, every key written out: each
    section and key of the code's defaults is in it, and it gives the same config, to the byte of its
    JSON (the manifest's provenance and the run's fingerprint): ``--config default`` and no config
    write the same files."""
    import json

    from llmpipe.config import config_file
    from llmpipe.curate.settings import CurateConfig

    written = load_yaml(config_file("default", "curate"))
    defaults = CurateConfig.from_mapping({}).to_dict()
    for section, keys in defaults.items():
        assert section in written, f"default.yaml lacks the section {section}"
        if isinstance(written[section], dict):
            missing = sorted(set(keys) - set(written[section]) - {"special_tokens"})  # shown as a comment
            assert not missing, f"default.yaml's {section} lacks {missing}"
    assert json.dumps(CurateConfig.load("default").to_dict(), sort_keys=True) == json.dumps(
        defaults, sort_keys=True
    )
    assert CurateConfig.load("default").sha256() == CurateConfig.from_mapping({}).sha256()


def test_fixed_shape_pairs() -> None:
    """``[n, fraction]`` pairs: an integer n and a number, exactly two."""
    from llmpipe.curate.settings import CurateConfig

    cfg = CurateConfig.from_mapping({"gopher_repetition": {"top_n_grams": [[2, 0.25]]}})
    assert cfg.stages["gopher_repetition"].top_n_grams == [(2, 0.25)]
    for bad, message in [([[2.5, 0.2]], "expected an integer"), ([[2, 0.2, 1]], "expected 2 items, got 3")]:
        with pytest.raises(ConfigError, match=message):
            CurateConfig.from_mapping({"gopher_repetition": {"top_n_grams": bad}})


def test_rust_filter_defaults_are_pythons_field_by_field() -> None:
    """The pipeline sends every threshold from Python; the Rust core's own defaults (for Rust callers
    and tests) must be the same values, so that neither side can drift."""
    import json

    from llmpipe import _core
    from llmpipe.cli import build_parser
    from llmpipe.quality import (
        C4Config,
        FineWebConfig,
        GopherQualityConfig,
        GopherRepetitionConfig,
        PiiConfig,
        core_json,
    )

    rust = json.loads(_core.quality_defaults())
    python = {
        "gopher_repetition": GopherRepetitionConfig(),
        "gopher_quality": GopherQualityConfig(),
        "c4": C4Config(),
        "fineweb": FineWebConfig(),
        "pii": PiiConfig(),
    }
    for name, cfg in python.items():
        mine = json.loads(core_json(cfg))
        assert sorted(mine) == sorted(rust[name]), name
        for key, value in mine.items():
            assert value == rust[name][key], f"{name}.{key}: Python {value!r}, Rust {rust[name][key]!r}"
    # the classifier's training options: the CLI's defaults (l2 is the core's alone)
    args = build_parser().parse_args(["quality", "train", "--positive", "p", "--negative", "n", "--out", "m"])
    cli = {k: getattr(args, k) for k in ("bits", "epochs", "lr", "seed")}
    assert cli == {k: rust["classifier"][k] for k in cli}
    from llmpipe.commands.quality import parse_char_ngrams

    assert parse_char_ngrams(args.char_ngrams) == rust["classifier"]["char_ngrams"]
