"""The package stands alone: configs by packaged name from any directory, one line naming the extra a
command needs, and imports that run one way (nothing in the package reaches into the checkout)."""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from llmpipe.config import config_file, packaged_configs
from llmpipe.errors import ConfigError
from llmpipe.extras import EXTRA_OF_COMMAND, missing_extra, run_main

PACKAGE = ROOT / "python" / "llmpipe"


def test_configs_by_packaged_name_from_any_directory(tmp_path: Path) -> None:
    assert {"tiny", "gpt2-124m", "llama-1b"} <= set(packaged_configs("train"))
    assert {"default", "sample", "web"} <= set(packaged_configs("curate"))
    here = Path.cwd()
    os.chdir(tmp_path)  # no configs/ here
    try:
        for name in ("tiny", "tiny.yaml", "configs/train/tiny.yaml"):
            p = config_file(name, "train")
            assert p.is_file() and p.read_bytes() == (PACKAGE / "configs/train/tiny.yaml").read_bytes()
        (tmp_path / "mine.yaml").write_text("model: {dim: 32}\n")
        assert config_file("mine.yaml", "train") == Path("mine.yaml")  # a file wins over a name
        with pytest.raises(ConfigError, match="ship with llmpipe: gpt2-124m, llama-1b, tiny"):
            config_file("nosuch", "train")
        with pytest.raises(ConfigError, match="does not exist"):
            config_file("elsewhere/tiny.yaml", "train")  # a path that is not configs/train/ is not a name
    finally:
        os.chdir(here)


def test_a_missing_extra_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    line = missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"), "export")
    assert (
        line
        == "llmpipe export needs the 'train' extra (torch is not installed): pip install 'llmpipe[train]'"
    )
    # a package no extra names: the command's own extra
    assert "'tune' extra" in (missing_extra(ModuleNotFoundError(name="pandas"), "sweep") or "")
    assert missing_extra(ModuleNotFoundError(name="llmpipe.nosuch"), "export") is None  # a bug, not an extra
    assert missing_extra(ModuleNotFoundError(name="nosuchpkg"), "curate") is None
    assert set(EXTRA_OF_COMMAND.values()) <= {"train", "eval", "compress", "ray", "s3", "tune"}
    # a package the command's own extra brings: that extra (README: quantize and prune need 'compress')
    for command, extra in (
        ("quantize", "compress"),
        ("prune", "compress"),
        ("eval", "eval"),
        ("sweep", "tune"),
    ):
        line = missing_extra(ModuleNotFoundError(name="torch"), command)
        assert line == (
            f"llmpipe {command} needs the '{extra}' extra (torch is not installed): pip install 'llmpipe[{extra}]'"
        )
    assert "pip install 'llmpipe[ray]'" in (missing_extra(ModuleNotFoundError(name="ray"), "curate") or "")


def test_ray_and_s3_say_llmpipes_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """--ray and an s3:// path without their packages name llmpipe's extras, as the README's table does."""
    from llmpipe.distributed.executor import RayExecutor
    from llmpipe.errors import InputError
    from llmpipe.io.fs import filesystem

    monkeypatch.setitem(sys.modules, "ray", None)  # as if they were not installed
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(
        InputError, match=re.escape("the 'ray' extra (ray is not installed): pip install 'llmpipe[ray]'")
    ):
        RayExecutor("auto")
    with pytest.raises(
        InputError, match=re.escape("the 's3' extra (s3fs is not installed): pip install 'llmpipe[s3]'")
    ):
        filesystem("s3://bucket/prefix")


def test_the_trainer_usage_names_how_it_was_invoked() -> None:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "llmpipe.train", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("usage: python -m llmpipe.train "), out[:80]


def test_the_extras_each_extra_includes_are_pyprojects() -> None:
    """``extras.INCLUDES`` says what pyproject.toml's extras install: each package of an included extra
    is a requirement of the including one (its own, or of an extra it names)."""
    import re
    import tomllib

    from llmpipe.extras import INCLUDES

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def packages(extra: str) -> set[str]:
        out: set[str] = set()
        for req in extras[extra]:
            name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()  # type: ignore[union-attr]
            if name == "llmpipe":
                for inner in re.search(r"\[(.*)\]", req).group(1).split(","):  # type: ignore[union-attr]
                    out |= packages(inner.strip())
            else:
                out.add(name)
        return out

    for extra, included in INCLUDES.items():
        for inner in included:
            assert packages(inner) <= packages(extra), (extra, inner)


def test_entry_scripts_say_which_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`torchrun -m llmpipe.train` and train/*.py without torch: one line, exit 2, no traceback."""
    (tmp_path / "entry_needing_torch.py").write_text("import torch\n\ndef main():\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    assert run_main("entry_needing_torch") == 2
    err = capsys.readouterr().err
    assert (
        err == "error: this needs the 'train' extra (torch is not installed): pip install 'llmpipe[train]'\n"
    )


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_imports_run_one_way() -> None:
    """Nothing in the package imports the checkout's train/ scripts or changes sys.path; the scripts
    only call the package."""
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "train").glob("*.py")]:
        text = path.read_text()
        assert "sys.path" not in text, path
        bad = {m for m in imports_of(path) if m == "train" or m.startswith("train.")}
        assert not bad, (path, bad)
    for script in (ROOT / "train").glob("*.py"):
        assert imports_of(script) <= {"sys", "llmpipe.extras"}, script


def test_the_version_is_the_packages_everywhere() -> None:
    """``llmpipe.__version__`` comes from the Rust core (cheap); the core's version (Cargo's workspace
    version) must be the one pyproject.toml gives the wheel, and the installed metadata's."""
    import tomllib
    from importlib.metadata import version

    import llmpipe
    from llmpipe import _core

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    assert project == cargo == _core.__version__ == llmpipe.__version__ == version("llmpipe")
