"""Bad invocations give one clear line and exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli


def test_missing_path(tmp_path: Path) -> None:
    p = run_cli("curate", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2
    assert "no such file or directory" in p.stderr
    assert "Traceback" not in p.stderr


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    p = run_cli("curate", str(tmp_path / "in"), "--out", str(tmp_path / "o"), check=False)
    assert p.returncode == 2
    assert "holds no input files" in p.stderr
    assert "Traceback" not in p.stderr


def test_unknown_config_key(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello world " * 10}) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pack:\n  seq_lenn: 8\n")
    p = run_cli(
        "curate", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "o"), "--config", str(cfg), check=False
    )
    assert p.returncode == 2
    assert "unknown key(s) ['seq_lenn']" in p.stderr
    assert "Traceback" not in p.stderr


def test_wrong_config_type(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello world " * 10}) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pack:\n  seq_len: long\n")
    p = run_cli(
        "curate", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "o"), "--config", str(cfg), check=False
    )
    assert p.returncode == 2
    assert "pack.seq_len: expected an integer" in p.stderr


def test_every_command_has_help() -> None:
    from llmpipe.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert sub.choices, "no commands registered"
    for name in sub.choices:
        p = run_cli(name, "--help")
        assert "usage: llmpipe" in p.stdout, name


def _bad_inputs(tmp: Path) -> dict[str, list[str]]:
    """One bad invocation per command; several fail inside the Rust core (tokenizer.json, the quality
    model), so they check that core errors arrive as llmpipe's own classes."""
    junk = tmp / "junk.json"
    junk.write_text('{"model": {"type": "WordPiece"}}')
    text = tmp / "a.txt"
    text.write_text("some words of text\n" * 20)
    model = tmp / "model.bin"
    model.write_bytes(b"not a quality model")
    (tmp / "empty").mkdir()
    sweep = tmp / "sweep.yaml"  # a misspelt key, refused before Ray starts
    sweep.write_text(f"data: {tmp}\nout: {tmp / 'o'}\nspacee: {{optim.lr: {{grid: [0.1]}}}}\n")
    ladder = tmp / "ladder.yaml"  # a directory that holds no shards
    ladder.write_text(
        f"data: {tmp}\nout: {tmp / 'o'}\nsizes: [{{dim: 16}}, {{dim: 32}}, {{dim: 64}}]\nsteps: [10]\n"
    )
    return {
        "sweep": ["sweep", str(sweep)],
        "scaling": ["scaling", str(ladder)],
        "curate": ["curate", str(text), "--out", str(tmp / "o"), "--tokenizer", str(junk)],
        "inspect": ["inspect", str(tmp / "empty")],
        "report": ["report", str(tmp / "empty")],
        "plan": ["plan", "--config", str(tmp / "missing.yaml")],
        "tokenizer train": [
            "tokenizer",
            "train",
            str(tmp / "missing.txt"),
            "--vocab-size",
            "300",
            "--out",
            str(junk),
        ],
        "tokenizer encode": ["tokenizer", "encode", "--tokenizer", str(junk)],
        "quality train": [
            "quality",
            "train",
            "--positive",
            str(text),
            "--negative",
            str(tmp / "nope"),
            "--out",
            str(model),
        ],
        "quality calibrate": [
            "quality",
            "calibrate",
            str(text),
            "--model",
            str(model),
            "--target-retention",
            "0.5",
        ],
        "quality check": ["quality", "check", str(tmp / "nope.jsonl")],
        "eval": ["eval", str(tmp / "empty"), "--text", str(text)],
        "export": ["export", str(tmp / "empty"), "--out", str(tmp / "hf")],
        "quantize": ["quantize", str(tmp / "empty"), "--method", "int8", "--out", str(tmp / "q")],
        "prune": ["prune", str(tmp / "empty"), "--sparsity", "0.5", "--out", str(tmp / "p")],
        "ablate": [
            "ablate",
            str(tmp / "empty"),
            str(tmp / "empty"),
            "--out",
            str(tmp / "abl"),
            "--text",
            str(text),
        ],
    }


def _commands() -> list[str]:
    """Every command and sub-command the CLI registers, e.g. ``curate``, ``tokenizer train``."""
    import argparse

    from llmpipe.cli import build_parser

    def leaves(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [prefix]
        return [
            name for a in subs for k, p in a.choices.items() for name in leaves(p, f"{prefix} {k}".strip())
        ]

    return leaves(build_parser(), "")


def test_every_command_fails_bad_input_with_one_line(tmp_path: Path) -> None:
    """Each command, given a bad input, exits non-zero with one line on stderr and no traceback."""
    cases = _bad_inputs(tmp_path)
    missing = sorted(set(_commands()) - set(cases))
    assert not missing, f"add a bad-input case for {missing}"
    for name, argv in cases.items():
        p = run_cli(*argv, check=False)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2, (name, p.returncode, p.stderr)
        assert len(lines) == 1 and lines[0].startswith("llmpipe: error:"), (name, p.stderr)
        assert "Traceback" not in p.stderr, name


def test_the_cli_starts_without_torch() -> None:
    """Every command's parser is built without importing torch: `llmpipe curate` starts in a second."""
    import subprocess
    import sys

    code = "import sys; from llmpipe.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_special_tokens_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """``--special-tokens``: a name that is neither a preset nor a literal token, and a given tokenizer
    that lacks the tokens named, each stop curate with one line (exit 2) before any work; the presets
    expand in order, each token once."""
    from llmpipe.cli import main
    from llmpipe.curate.settings import CurateConfig
    from llmpipe.tokenizer import EOS, Tokenizer, expand_special_tokens

    doc = tmp_path / "a.jsonl"
    doc.write_text(json.dumps({"text": "hello world " * 10}) + "\n")
    tok = tmp_path / "tok.json"
    Tokenizer.train_from_texts(["hello world"] * 10, 300, special_tokens=[EOS, "<mask>"]).save(str(tok))
    cases = {
        ("--special-tokens", "mask"): "'mask': not a preset (mlm, t5)",
        ("--special-tokens", "<cls>,<|endoftext|>"): "<|endoftext|>: it is always there",
        (
            "--special-tokens",
            "mlm",
            "--tokenizer",
            str(tok),
        ): "names <pad>, which the tokenizer does not hold",
    }
    for extra, message in cases.items():
        assert main(["curate", str(doc), "--out", str(tmp_path / "o"), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err and err.startswith("llmpipe: error:"), err
    assert not (tmp_path / "o" / "manifest.json").exists()
    assert expand_special_tokens(["t5", "mlm", "[SEP]"])[:2] == ["<pad>", "<extra_id_0>"]
    assert expand_special_tokens(["t5", "mlm", "[SEP]"])[-2:] == ["<mask>", "[SEP]"]
    assert len(expand_special_tokens(["mlm", "t5"])) == 102
    # the typed key of the config's tokenizer section, the same check
    cfg = CurateConfig.from_mapping({"tokenizer": {"special_tokens": ["mlm"]}})
    assert cfg.tokenizer.reserved() == ["<mask>", "<pad>"]
    assert "special_tokens" not in CurateConfig.from_mapping({}).to_dict()["tokenizer"]  # default: as before


def _one_line_failures(tmp: Path) -> list[tuple[list[str], str]]:
    """Invocations refused before any work with one line, and what that line says: values that make no
    sense, paths of the wrong kind. ``{tmp}`` in an argument is the test's directory."""
    doc = tmp / "a.jsonl"
    doc.write_text(json.dumps({"text": "hello world " * 10}) + "\n")
    (tmp / "afile").write_text("a plain text file\n")
    afile = str(tmp / "afile")
    (run := tmp / "run").mkdir()
    (empty := tmp / "empty.txt").write_text("")
    out = str(tmp / "o" / "x")
    curate = ["curate", str(doc), "--out", out, "--quiet"]
    train = ["tokenizer", "train", str(doc), "--vocab-size", "300"]
    (tmp / "flow.yaml").write_text("language:\n  enabled: [true\n")
    (tmp / "indent.yaml").write_text("a: b\n c: d\n")
    (tmp / "decont.yaml").write_text(
        f"decontaminate:\n  enabled: true\n  eval_sets: {{m: {tmp / 'no-set.jsonl'}}}\n"
    )
    return [
        # --chunk-mb: a positive number of MB
        ([*curate, "--chunk-mb", "nan"], "--chunk-mb must be a positive number of MB, got nan"),
        ([*curate, "--chunk-mb", "inf"], "--chunk-mb must be a positive number of MB, got inf"),
        ([*curate, "--chunk-mb", "-1"], "--chunk-mb must be a positive number of MB, got -1"),
        ([*curate, "--chunk-mb", "1e-9"], "--chunk-mb must be a positive number of MB"),
        # --ray: an address Ray takes, not a dashboard URL, not empty (which ran locally)
        ([*curate, "--ray", ""], "--ray needs an address: auto, HOST:PORT or ray://HOST:PORT"),
        ([*curate, "--ray", "foo"], "--ray foo: not a Ray address; use auto, HOST:PORT or ray://HOST:PORT"),
        ([*curate, "--ray", "http://127.0.0.1:8265"], "that is a dashboard (Jobs API) address"),
        # the tokenizer to train, or the one given, and the packer's bounds: before any stage runs
        ([*curate, "--vocab-size", "10"], "--vocab-size 10: tokenizer.vocab_size 10 is too small"),
        ([*curate, "--vocab-size", "0"], "needs at least 257 (256 byte tokens + 1 special token(s))"),
        ([*curate, "--vocab-size", "-1"], "tokenizer.vocab_size -1 is too small"),
        ([*curate, "--vocab-size", "300", "--special-tokens", "t5"], "needs at least 358"),
        ([*curate, "--tokenizer", str(tmp / "afile")], f"--tokenizer {tmp / 'afile'}: not valid JSON"),
        ([*curate, "--seq-len", "100000000"], "pack.seq_len 100,000,000 is above the longest llmpipe packs"),
        ([*curate, "--seq-len", "1048576"], "set pack.samples_per_shard to at most 4,095"),
        # a config that is not YAML: where and what, on one line
        (
            ["curate", str(doc), "--out", out, "--config", str(tmp / "flow.yaml")],
            "flow.yaml: not valid YAML at line 3, column 1: while parsing a flow sequence expected ',' or ']'",
        ),
        (
            ["curate", str(doc), "--out", out, "--config", str(tmp / "indent.yaml")],
            "indent.yaml: not valid YAML at line 2, column 3: mapping values are not allowed here",
        ),
        # a file the config names that a stage refuses: found before the --out directory is made
        (
            ["curate", str(doc), "--out", out, "--config", str(tmp / "decont.yaml")],
            f"decontaminate.eval_sets.m: {tmp / 'no-set.jsonl'} does not exist",
        ),
        # inputs that hold nothing to read: no --out directory is made for them
        (["curate", str(tmp / "nothing-here"), "--out", out], "nothing-here: no such file or directory"),
        (["curate", str(tmp / "*.parquet"), "--out", out], "the pattern matches no file"),
        # an --out that is a file: refused before the model (the run, here an empty directory) loads
        (["curate", str(doc), "--out", afile], f"--out {afile}: is a file, not a directory"),
        (["curate", str(doc), "--out", f"{afile}/x"], f"--out {afile}/x: {afile} is a file, not a directory"),
        (["export", str(run), "--out", afile], f"--out {afile}: is a file, not a directory"),
        (["export", str(run), "--out", afile, "--overwrite"], f"--out {afile}: is a file, not a directory"),
        (["quantize", str(run), "--method", "int8", "--out", afile], "is a file, not a directory"),
        (["prune", str(run), "--sparsity", "0.5", "--out", afile], "is a file, not a directory"),
        # values the commands took for something else: an empty text scored as nan, a group size of 0 as
        # the default, a negative step as the checkpoint step--0000001
        (["eval", str(run), "--text", str(empty)], f"{empty}: no text to score (an empty file"),
        (
            ["eval", str(run), "--text", str(empty), "--max-docs", "-1"],
            "--max-docs -1: a number of documents",
        ),
        (
            ["quantize", str(run), "--method", "int4", "--group-size", "0", "--out", out],
            "--group-size must be a positive number of weights, got 0",
        ),
        (["export", str(run), "--step", "-1", "--out", out], "--step -1: a checkpoint's step is 0 or more"),
        # special tokens of tokenizer train: each once, none that is ordinary text (as --special-tokens)
        (
            [*train, "--special-token", "<a>", "--special-token", "<a>", "--out", out],
            "special token(s) ['<a>'] named more than once: each takes one id",
        ),
        (
            [*train, "--special-token", "a", "--out", out],
            "special token 'a': ordinary text; a special token holds a character other than letters, digits",
        ),
        (
            [*train, "--special-token", "a", "--special-token", "a", "--out", out],
            "special token 'a': ordinary text",
        ),
        (
            [*train, "--special-token", "<s> ", "--out", out],
            "special token '<s> ': empty or holds whitespace",
        ),
        # a directory where a file is wanted is said as such, not as a missing file
        (["tokenizer", "encode", "--tokenizer", str(run)], f"{run}: is a directory, not a file"),
        (["tokenizer", "encode", "--tokenizer", str(tmp / "nope.json")], "nope.json: no such tokenizer file"),
    ]


def test_bad_values_fail_with_one_line_before_any_work(tmp_path: Path, capsys) -> None:
    """Each invocation of the table exits 2 with one line saying what is wrong, and writes nothing."""
    from llmpipe.cli import main

    for argv, message in _one_line_failures(tmp_path):
        before = sorted(p.name for p in tmp_path.rglob("*"))
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("llmpipe: error:") and "\n" not in err, (argv, err)
        assert message in err, (argv, err)
        assert sorted(p.name for p in tmp_path.rglob("*")) == before, (argv, "left files behind")


def test_a_directory_named_as_a_stage_file_is_said_so(tmp_path: Path) -> None:
    """A model or evaluation file that is a directory is "is a directory, not a file", one that is not
    there "does not exist": each one line when the stages are built, before any stage runs."""
    from llmpipe.curate.settings import CurateConfig
    from llmpipe.errors import ConfigError

    d, gone = tmp_path / "models", tmp_path / "gone.bin"
    d.mkdir()
    for path, why in ((d, "is a directory, not a file"), (gone, "does not exist")):
        for section, message in [
            ({"language": {"backend": "fasttext", "model": str(path)}}, f"language: model: {path} {why}"),
            ({"quality_model": {"enabled": True, "model": str(path)}}, f"quality_model.model: {path} {why}"),
            (
                {"decontaminate": {"enabled": True, "eval_sets": {"m": str(path)}}},
                f"decontaminate.eval_sets.m: {path} {why}",
            ),
        ]:
            cfg = CurateConfig.from_mapping(section)
            with pytest.raises(ConfigError) as e:
                cfg.build_stages()
            assert str(e.value).endswith(message), (str(e.value), message)


def test_pack_and_tokenizer_bounds_in_the_config() -> None:
    """The bounds are the config's own: a YAML config gets them as the options do."""
    from llmpipe.curate.settings import MAX_SEQ_LEN, CurateConfig
    from llmpipe.errors import ConfigError

    for section, message in [
        ({"tokenizer": {"vocab_size": 256}}, "tokenizer.vocab_size 256 is too small"),
        ({"tokenizer": {"vocab_size": 258, "special_tokens": ["mlm"]}}, "needs at least 259"),
        ({"pack": {"seq_len": MAX_SEQ_LEN + 1}}, "above the longest llmpipe packs"),
        ({"pack": {"samples_per_shard": 0}}, "pack.samples_per_shard must be at least 1"),
        ({"pack": {"packing": "best_fit", "best_fit_window": 0}}, "pack.best_fit_window must be at least 1"),
        (
            {"pack": {"packing": "best_fit", "best_fit_window": -3}},
            r"best_fit_window must be at least 1 \(samples\), not -3",
        ),
    ]:
        with pytest.raises(ConfigError, match=message):
            CurateConfig.from_mapping(section)
    from llmpipe.data.writer import ShardWriter

    for window in (0, -3):  # the writer refuses it too, never clamps it to 1 (which packs other rows)
        with pytest.raises(ValueError, match=f"best_fit_window must be at least 1, not {window}"):
            ShardWriter(
                Path("unused"), seq_len=8, vocab_size=300, eos_id=0, tokenizer_file=Path("t.json"),
                packing="best_fit", best_fit_window=window,
            )  # fmt: skip
    cfg = CurateConfig.from_mapping({"pack": {"seq_len": MAX_SEQ_LEN, "samples_per_shard": 4095}})
    assert cfg.pack.seq_len == MAX_SEQ_LEN
    assert CurateConfig.from_mapping({"tokenizer": {"vocab_size": 257}}).tokenizer.vocab_size == 257


def test_a_device_the_machine_lacks_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """``eval --device cuda`` on a machine without CUDA (made so here), a device index it lacks, and a
    name torch does not know: one line before the model loads (the model is an empty directory)."""
    import torch
    from llmpipe.cli import main

    text = tmp_path / "a.txt"
    text.write_text("some words of text\n")
    (tmp_path / "run").mkdir()
    cases = [
        (
            "cuda",
            False,
            "--device cuda: CUDA is not available on this machine (no GPU, or no driver); use --device cpu",
        ),
        ("cuda:0", False, "--device cuda:0: CUDA is not available"),
        ("cuda:3", True, "--device cuda:3: this machine has 1 CUDA device(s)"),
        ("gpu", False, "--device 'gpu': not a device (cpu, cuda, cuda:1 ...)"),
    ]
    for device, available, message in cases:
        monkeypatch.setattr(torch.cuda, "is_available", lambda a=available: a)
        monkeypatch.setattr(torch.cuda, "device_count", lambda a=available: int(a))
        assert main(["eval", str(tmp_path / "run"), "--text", str(text), "--device", device]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("llmpipe: error:") and message in err and "\n" not in err, err
