"""`llmpipe tokenizer train|encode` as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import run_cli
from tokenizers import Tokenizer as HFTokenizer


def test_train_then_encode_stdin(data_dir: Path, tmp_path: Path) -> None:
    src = data_dir / "reference" / "books" / "wonderland.txt"
    out = tmp_path / "tok" / "tokenizer.json"
    p = run_cli(
        "tokenizer",
        "train",
        str(src),
        "--vocab-size",
        "600",
        "--out",
        str(out),
        "--pattern",
        "cl100k",
        "--special-token",
        "<|endoftext|>",
        "--special-token",
        "<|pad|>",
    )
    assert "vocab 600" in p.stdout
    hf = HFTokenizer.from_file(str(out))
    assert hf.get_vocab_size() == 600
    assert hf.token_to_id("<|pad|>") == 1
    text = src.read_text(encoding="utf-8")[:5000]
    exe = Path(sys.executable).with_name("llmpipe")
    enc = subprocess.run(
        [str(exe), "tokenizer", "encode", "--tokenizer", str(out)],
        input=text.encode(),
        capture_output=True,
        check=True,
    )
    lines = enc.stdout.decode().splitlines()
    assert len(lines) == 1
    ids = [int(x) for x in lines[0].split()]
    assert ids == hf.encode(text, add_special_tokens=False).ids
    assert hf.decode(ids, skip_special_tokens=False) == text


def test_errors_are_messages_not_tracebacks(tmp_path: Path) -> None:
    p = run_cli(
        "tokenizer",
        "train",
        str(tmp_path / "missing.txt"),
        "--vocab-size",
        "500",
        "--out",
        str(tmp_path / "t.json"),
        check=False,
    )
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr
    src = tmp_path / "a.txt"
    src.write_text("hello world\n")
    p = run_cli(
        "tokenizer", "train", str(src), "--vocab-size", "100", "--out", str(tmp_path / "t.json"), check=False
    )
    assert p.returncode == 2 and "too small" in p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    p = run_cli("tokenizer", "encode", "--tokenizer", str(bad), check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    for args in (
        ("tokenizer", "--help"),
        ("tokenizer", "train", "--help"),
        ("tokenizer", "encode", "--help"),
    ):
        assert run_cli(*args).returncode == 0
