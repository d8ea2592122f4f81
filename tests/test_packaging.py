"""The package stands alone: configs by packaged name from any directory, one line naming the extra a
command needs, and imports that run one way (nothing in the package reaches into the checkout)."""

from __future__ import annotations

import ast
import os
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
