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
    out.parent.mkdir()
    (out.parent / ".tokenizer.json.tmp").write_text("a user's file")  # not llmpipe's temporary name
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
    assert sorted(x.name for x in out.parent.iterdir()) == [".tokenizer.json.tmp", "tokenizer.json"]
    assert (out.parent / ".tokenizer.json.tmp").read_text() == "a user's file"
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


def _fails(capsys, *argv: str) -> str:
    """`llmpipe ARGV` (in this process) exits 2 with one line; that line."""
    from llmpipe.cli import main

    assert main(list(argv)) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("llmpipe: error:") and "\n" not in err, err
    return err


def test_out_is_checked_before_training(data_dir: Path, tmp_path: Path, capsys) -> None:
    """--out names a file: a directory is refused (even with --overwrite) and so is a file llmpipe did not
    write (an HF tokenizer saved by `tokenizers`, a user's file) unless --overwrite; nothing is left behind.
    A tokenizer llmpipe wrote is replaced without the flag."""
    from llmpipe.cli import main
    from tokenizers import models

    src = tmp_path / "a.txt"
    src.write_bytes((data_dir / "reference" / "books" / "wonderland.txt").read_bytes()[:50_000])
    train = ["tokenizer", "train", str(src), "--vocab-size", "300", "--out"]
    tokd = tmp_path / "tokd"
    tokd.mkdir()
    (tokd / "precious.txt").write_text("keep")
    err = _fails(capsys, *train, str(tokd), "--overwrite")
    assert f"--out {tokd}: is a directory; --out names the tokenizer.json file to write" in err
    assert [p.name for p in tokd.iterdir()] == ["precious.txt"]
    assert _fails(capsys, *train, str(src / "t.json")).endswith(f"{src} is a file, not a directory")
    wordpiece = tmp_path / "wp.json"
    HFTokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(str(wordpiece))
    hf_bpe = tmp_path / "hf.json"  # a byte-level BPE that llmpipe loads, but HF wrote
    assert main([*train, str(tmp_path / "ours.json")]) == 0
    capsys.readouterr()
    HFTokenizer.from_file(str(tmp_path / "ours.json")).save(str(hf_bpe))
    for theirs in (wordpiece, hf_bpe):
        before = theirs.read_bytes()
        assert "exists and is not a tokenizer llmpipe wrote" in _fails(capsys, *train, str(theirs))
        assert theirs.read_bytes() == before
    assert main([*train, str(wordpiece), "--overwrite"]) == 0
    assert HFTokenizer.from_file(str(wordpiece)).get_vocab_size() == 300
    assert main([*train, str(tmp_path / "ours.json"), "--vocab-size", "400"]) == 0  # its own: replaced
    assert HFTokenizer.from_file(str(tmp_path / "ours.json")).get_vocab_size() == 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "hf.json", "ours.json", "tokd", "wp.json"]


def test_inputs_compressed_binary_directory_and_too_little(
    data_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """gzip, zstd and bz2 inputs are decompressed (the same tokenizer as the plain text, counted here in
    blocks of 4 kB to cut lines across blocks); a directory, a Parquet file and binary data are refused with
    one line; an input too small for --vocab-size gives fewer ids and a warning line that says so."""
    import bz2
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    from llmpipe.cli import main
    from llmpipe.commands import tokenizer as command

    monkeypatch.setattr(command, "TEXT_BLOCK", 4096)
    text = (data_dir / "reference" / "books" / "wonderland.txt").read_bytes()[:200_000]
    plain = tmp_path / "w.txt"
    plain.write_bytes(text)
    (tmp_path / "w.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "w.zst").write_bytes(zstandard.compress(text))
    (tmp_path / "w.bz2").write_bytes(bz2.compress(text))
    (tmp_path / "half.gz").write_bytes(gzip.compress(text[:100_000]))
    (tmp_path / "half2.txt").write_bytes(text[100_000:])

    def trained(*inputs: str) -> str:
        out = tmp_path / "tok.json"
        assert main(["tokenizer", "train", *inputs, "--vocab-size", "600", "--out", str(out)]) == 0
        capsys.readouterr()
        return out.read_text()

    want = trained(str(plain))
    assert "Ġthe" in want and "\ufffd" not in want
    for name in ("w.txt.gz", "w.zst", "w.bz2"):
        assert trained(str(tmp_path / name)) == want, name
    assert trained(str(tmp_path / "half.gz"), str(tmp_path / "half2.txt")) == want  # mixed, in order
    takes = "tokenizer train takes UTF-8 text files (plain, .gz, .zst or .bz2)"
    train = ["tokenizer", "train", "--vocab-size", "300", "--out", str(tmp_path / "t.json")]
    assert f"{tmp_path}: is a directory; {takes}" in _fails(capsys, *train, str(tmp_path))
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": [text.decode("utf-8", "replace")]}), parquet)
    assert f"{parquet}: a Parquet file; {takes}" in _fails(capsys, *train, str(parquet))
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 16)
    assert f"{binary}: not UTF-8 text; {takes}" in _fails(capsys, *train, str(binary))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1") * 100)
    assert "latin1.txt: not UTF-8 text" in _fails(capsys, *train, str(latin1))
    assert not (tmp_path / "t.json").exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main([*train, str(empty)]) == 0
    err = capsys.readouterr().err
    assert "llmpipe: warning: the inputs gave only 257 of the 300 ids asked for" in err
    assert HFTokenizer.from_file(str(tmp_path / "t.json")).get_vocab_size() == 257
