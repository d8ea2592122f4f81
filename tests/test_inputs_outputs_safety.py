"""Files from strangers stay where they belong (issue 28, items 2-6 and 15): a closed Ray dashboard,
symlinks that cannot lead out of the inputs, every path not read listed with why, FIFOs and devices
never opened, an --out of the user's files refused, a planted lock symlink not followed, manifest
names that cannot leave the shard directory, an unreachable store said as such, a cut zstd file
quarantined as truncated.

Inputs are cut from the real crawl data; each test curates a handful of documents."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_cli
from llmpipe.cli import main

SAMPLE = ROOT / "configs" / "curate" / "sample.yaml"


def _docs(data_dir: Path, start: int, n: int) -> bytes:
    """Lines ``start`` to ``start + n`` of a real crawl extract (one document each)."""
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rb") as f:
        return b"".join(line for i, line in enumerate(f) if start <= i < start + n)


def _curate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["curate", *argv, "--config", str(SAMPLE), "--workers", "1", "--quiet"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip()


def _one_line(rc: int, err: str) -> str:
    assert rc == 2 and err.startswith("llmpipe: error: ") and "\n" not in err, (rc, err)
    return err


def test_item2_ray_cluster_dashboard_is_closed_by_default() -> None:
    text = (ROOT / "configs" / "ray" / "cluster.yaml").read_text()
    cfg = yaml.safe_load(text)
    commands = [c for key, v in cfg.items() if key.endswith("_commands") for c in v]
    head = " ".join(cfg["head_start_ray_commands"])
    assert "0.0.0.0" not in " ".join(commands) and "--dashboard-host=127.0.0.1" in head
    assert "ray dashboard" in text and "ssh -L 8265:127.0.0.1:8265" in text  # how to reach it
    readme = (ROOT / "README.md").read_text()
    assert "--dashboard-host=0.0.0.0" not in readme
    assert """--runtime-env-json '{"env_vars\"""" not in readme  # no credentials in the job's env
    assert "ssh -N -L 8265:127.0.0.1:8265" in readme and "instance role" in readme


def test_item3_symlink_outside_inputs_is_not_read(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d, secret = tmp_path / "in", tmp_path / "secret"
    (d / "sub").mkdir(parents=True)
    secret.mkdir()
    (d / "a.jsonl").write_bytes(_docs(data_dir, 0, 30))
    (d / "sub" / "b.jsonl").write_bytes(_docs(data_dir, 50, 10))
    secret_docs = _docs(data_dir, 100, 15)
    (secret / "shadow.jsonl").write_bytes(secret_docs)
    n_secret = secret_docs.count(b"\n")
    (d / "shadow.jsonl").symlink_to(secret / "shadow.jsonl")  # out of the inputs: not read
    (d / "elsewhere").symlink_to(secret)
    (d / "inner.jsonl").symlink_to(d / "sub" / "b.jsonl")  # inside: read once
    rc, out, _ = _curate(capsys, str(d), "--out", str(tmp_path / "o"))
    assert rc == 0
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["retention"]["docs_in"] == 40
    skipped = stats["inputs"]["skipped"]
    for name in ("shadow.jsonl", "elsewhere"):
        assert any(f"{d / name}: a symlink to " in s and "outside the inputs" in s for s in skipped), skipped
        assert f"skipped {d / name}: a symlink to" in out
    secret_text = json.loads(secret_docs.splitlines()[0])["text"][:80]
    for f in ("stats.json", "report.html", "quarantine.jsonl"):
        assert secret_text not in (tmp_path / "o" / f).read_text()
    # with --follow-symlinks the user says where links may lead
    rc, _, _ = _curate(capsys, str(d), "--out", str(tmp_path / "o2"), "--follow-symlinks")
    stats = json.loads((tmp_path / "o2" / "stats.json").read_text())
    assert rc == 0 and stats["retention"]["docs_in"] == 40 + n_secret
    assert not any("outside the inputs" in s for s in stats["inputs"]["skipped"])


def test_glob_matches_are_held_to_the_globs_directory(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A glob names the directory it starts from: a match that is a symlink out of it (a file, or a
    directory the glob would walk) is skipped and listed as a walk of that directory would do."""
    d, secret = tmp_path / "crawl", tmp_path / "secret"
    (d / "sub").mkdir(parents=True)
    secret.mkdir()
    (d / "a.txt").write_bytes(_docs(data_dir, 0, 20))
    secret_docs = _docs(data_dir, 100, 15)
    (secret / "shadow.txt").write_bytes(secret_docs)
    (d / "evil.txt").symlink_to(secret / "shadow.txt")
    (d / "sub" / "etc").symlink_to(secret)  # a directory link matched by sub/*
    (d / "same.txt").symlink_to(d / "a.txt")  # inside the glob's directory: read (once)
    secret_text = json.loads(secret_docs.splitlines()[0])["text"][:80]
    for pattern, skipped_name, docs in ((d / "*.txt", "evil.txt", 20), (d / "sub" / "*", "sub/etc", 0)):
        out = tmp_path / f"o-{docs}"
        rc, log, err = _curate(
            capsys, str(pattern), *([str(d / "a.txt")] if not docs else []), "--out", str(out)
        )
        assert rc == 0, err
        stats = json.loads((out / "stats.json").read_text())
        assert stats["retention"]["docs_in"] == 20
        why = f"{d / skipped_name}: a symlink to {secret}"
        assert any(s.startswith(why) and "outside the inputs" in s for s in stats["inputs"]["skipped"]), stats
        assert f"skipped {why}" in log
        for f in ("stats.json", "report.html", "quarantine.jsonl"):
            assert secret_text not in (out / f).read_text()
    # only links out: one line that says why nothing was read
    rc, _, err = _curate(capsys, str(d / "sub" / "*"), "--out", str(tmp_path / "o-none"))
    assert "the inputs hold no files" in _one_line(rc, err) and "outside the inputs" in err
    # the user lets links lead anywhere
    rc, _, err = _curate(capsys, str(d / "*.txt"), "--out", str(tmp_path / "o-follow"), "--follow-symlinks")
    stats = json.loads((tmp_path / "o-follow" / "stats.json").read_text())
    assert rc == 0 and stats["retention"]["docs_in"] == 20 + secret_docs.count(b"\n"), err


def test_names_that_are_not_utf8_are_listed_not_read(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_bytes(_docs(data_dir, 0, 20))
    bad = os.path.join(os.fsencode(d), b"bad\xffname.jsonl")  # a Latin-1 name on a UTF-8 system
    with open(bad, "wb") as f:
        f.write(_docs(data_dir, 40, 10))
    os.mkdir(os.path.join(os.fsencode(d), b"dir\xe9"))
    with open(os.path.join(os.fsencode(d), b"dir\xe9", b"b.jsonl"), "wb") as f:
        f.write(_docs(data_dir, 60, 10))
    rc, log, err = _curate(capsys, str(d), "--out", str(tmp_path / "o"))
    assert rc == 0, err
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["retention"]["docs_in"] == 20
    for shown in (f"{d}/bad\\xffname.jsonl", f"{d}/dir\\xe9"):
        assert f"{shown}: the name is not valid UTF-8" in " ".join(stats["inputs"]["skipped"]), stats
        assert f"skipped {shown}: the name is not valid UTF-8" in log
    for arg in (os.fsdecode(bad), str(d / "*.jsonl")):  # named: one line; matched by a glob: listed
        rc, log, err = _curate(capsys, arg, "--out", str(tmp_path / "o2"))
        if "*" in arg:
            assert rc == 0 and "bad\\xffname.jsonl: the name is not valid UTF-8" in log, err
        else:
            assert "bad\\xffname.jsonl: the name is not valid UTF-8" in _one_line(rc, err)
    assert main(["quality", "check", str(d)]) == 0  # the same discovery: the name is left out
    assert "llmpipe: skipped " in capsys.readouterr().err  # listed, as curate lists it


def test_item4_every_skipped_input_is_listed_and_fifos_devices_are_refused(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_bytes(_docs(data_dir, 0, 30))
    (d / ".hidden.jsonl").write_bytes(_docs(data_dir, 60, 5))
    (d / "notes.tmp").write_bytes(_docs(data_dir, 60, 5))
    os.mkfifo(d / "pipe.jsonl")  # opened, it would block the run
    (d / "to-pipe.jsonl").symlink_to(d / "pipe.jsonl")
    (d / "zero.jsonl").symlink_to("/dev/zero")
    (d / "gone.jsonl").symlink_to(tmp_path / "nothing-here.jsonl")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(d / "sock.jsonl"))
        rc, out, _ = _curate(capsys, str(d), "--out", str(tmp_path / "o"))
    assert rc == 0
    skipped = json.loads((tmp_path / "o" / "stats.json").read_text())["inputs"]["skipped"]
    want = {
        ".hidden.jsonl": "a hidden name",
        "notes.tmp": "a .tmp file",
        "pipe.jsonl": "a FIFO (named pipe)",
        "to-pipe.jsonl": "a symlink to a FIFO (named pipe)",
        "zero.jsonl": "a symlink to a character device",
        "gone.jsonl": "a broken symlink",
        "sock.jsonl": "a socket",
    }
    for name, why in want.items():
        assert any(s.startswith(f"{d / name}: {why}") for s in skipped), (name, skipped)
        assert f"skipped {d / name}: {why}" in out
    assert len(skipped) == len(want)
    assert f"{len(want)} input path(s) not read" in out  # the summary at the end of the run
    rc, _, err = _curate(capsys, str(d), "--out", str(tmp_path / "o3"), "--strict")
    assert "gone.jsonl: a broken symlink [--strict]" in _one_line(rc, err)
    # a FIFO or device named as an input, or matched by a glob: one line, never opened
    for args, says in (
        ([str(d / "pipe.jsonl")], "a FIFO (named pipe), not a file"),
        ([str(d / "a.jsonl"), "/dev/zero"], "/dev/zero: a character device, not a file"),
        ([str(d / "p*.jsonl")], f"(matched by {d / 'p*.jsonl'}): a FIFO"),
        ([str(d / "to-pipe.jsonl")], "a FIFO (named pipe), not a file"),
    ):
        rc, _, err = _curate(capsys, *args, "--out", str(tmp_path / "o2"))
        assert says in _one_line(rc, err)


def test_item5_out_with_foreign_files_is_refused_and_lock_symlinks_are_not_followed(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = tmp_path / "a.jsonl"
    inp.write_bytes(_docs(data_dir, 0, 30))
    out = tmp_path / "o"
    out.mkdir()
    mine = {"train-important.arrow": b"my data", "tokenizer.json": b"{}", "report.html": b"<p>mine</p>"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    rc, _, err = _curate(capsys, str(inp), "--out", str(out))
    assert "report.html, tokenizer.json, train-important.arrow" in _one_line(rc, err) and "--overwrite" in err
    assert {n: (out / n).read_bytes() for n in mine} == mine and not (out / "manifest.json").exists()
    # --overwrite: written there, and a file that only looks like a shard is not deleted
    rc, _, _ = _curate(capsys, str(inp), "--out", str(out), "--overwrite")
    assert rc == 0 and (out / "train-important.arrow").read_bytes() == b"my data"
    assert (out / "train-00000.arrow").is_file()
    # llmpipe's own output: a run killed while publishing, then run again, needs no flag
    own = tmp_path / "own"
    args = [str(inp), "--out", str(own), "--config", str(SAMPLE), "--workers", "1", "--quiet"]  # as _curate
    p = run_cli("curate", *args, env={"LLMPIPE_FAULT_AFTER": "stats"}, check=False)
    assert p.returncode == -9 and not (own / "manifest.json").exists() and (own / "stats.json").exists()
    assert _curate(capsys, str(inp), "--out", str(own))[0] == 0 and (own / "manifest.json").is_file()
    (own / "notes.txt").write_text("mine")  # a user's file dropped into an llmpipe output
    rc, _, err = _curate(capsys, str(inp), "--out", str(own))
    assert "holds files llmpipe did not write (notes.txt)" in _one_line(rc, err)
    # a planted lock symlink is not followed: its target stays as it was
    target = tmp_path / "precious.txt"
    target.write_text("precious")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / ".llmpipe.lock").symlink_to(target)
    rc, _, err = _curate(capsys, str(inp), "--out", str(planted))
    assert ".llmpipe.lock: a symlink, not llmpipe's lock file" in _one_line(rc, err)
    assert target.read_text() == "precious"
    # the trainer's run directory: rank 0's check and lock (``pretrain.lock_run_dir``), the same refusals
    from llmpipe.errors import LlmpipeError
    from llmpipe.lock import DirLock
    from llmpipe.train.rundir import RUN_DIR

    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    with pytest.raises(LlmpipeError, match=r"--out .*run: holds files llmpipe did not write \(notes.txt\)"):
        RUN_DIR.check(run, overwrite=False)
    RUN_DIR.check(planted, overwrite=False)  # only a lock file: nothing of the user's to protect
    with pytest.raises(LlmpipeError, match="a symlink, not llmpipe's lock file"):
        DirLock(planted, "run directory").acquire()
    assert target.read_text() == "precious" and sorted(os.listdir(run)) == ["notes.txt"]
    RUN_DIR.check(run, overwrite=True)
    with DirLock(run, "run directory"):
        assert (run / ".llmpipe.lock").is_file() and not (run / ".llmpipe.lock").is_symlink()
    # export (which replaces its --out whole) and tokenizer train: a user's files are not replaced
    rc = main(["export", str(tmp_path / "no-run"), "--out", str(run)])
    assert "holds files llmpipe did not write (notes.txt)" in _one_line(rc, capsys.readouterr().err.strip())
    rc = main(["tokenizer", "train", str(inp), "--vocab-size", "300", "--out", str(run / "notes.txt")])
    assert "is not a tokenizer llmpipe wrote" in _one_line(rc, capsys.readouterr().err.strip())
    assert (run / "notes.txt").read_text() == "mine"


def test_item5_quantize_and_prune_keep_a_users_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """quantize and prune replace their --out whole: a directory of the user's files is refused (one
    line, nothing deleted) before any model loads; an earlier output of theirs is replaced as before."""
    from llmpipe.compress.report import REPORT_JSON
    from llmpipe.train.rundir import COMPRESS_REPORT

    assert REPORT_JSON == COMPRESS_REPORT  # the proof the check looks for is what the report writes
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    (mine / "config.json").write_text("{}\n")  # one of the names quantize writes, but no earlier output
    missing = str(tmp_path / "no-such-model")
    for argv in (
        ["quantize", missing, "--method", "int8", "--out", str(mine)],
        ["prune", missing, "--sparsity", "0.5", "--out", str(mine)],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(err) == 1 and "notes.txt" in err[0] and "--overwrite" in err[0], err
        assert (mine / "notes.txt").read_text() == "keep me\n"
    earlier = tmp_path / "earlier"  # an earlier quantize output: the check passes, the model is looked at
    earlier.mkdir()
    for name in ("config.json", "model.safetensors", COMPRESS_REPORT):
        (earlier / name).write_text("{}\n")
    capsys.readouterr()
    assert main(["quantize", missing, "--method", "int8", "--out", str(earlier)]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "--overwrite" not in err, err
    # --overwrite lets the user replace their own directory: the check passes, the missing model stops it
    assert main(["quantize", missing, "--method", "int8", "--out", str(mine), "--overwrite"]) == 2
    assert "no-such-model" in capsys.readouterr().err and (mine / "notes.txt").exists()


def test_item6_manifest_names_must_stay_in_the_shard_directory(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmpipe.data.dataset import ShardDataset
    from llmpipe.errors import ShardError
    from llmpipe.train.byte_shards import write_byte_shards

    shards = write_byte_shards(
        data_dir / "reference" / "books" / "tiny-shakespeare.txt", tmp_path / "s", max_chars=20_000
    )
    good = json.loads((shards / "manifest.json").read_text())
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    bad_names = ["../passwd", "/etc/hostname", "sub/train-00000.arrow", "..", ".", "a\0b", ""]
    for where in ("shard", "tokenizer"):
        for name in bad_names:
            m = json.loads(json.dumps(good))
            if where == "shard":
                m["splits"]["train"]["shards"][0]["file"] = name
            else:
                m["tokenizer"]["file"] = name
            (shards / "manifest.json").write_text(json.dumps(m))
            rc = main(["inspect", str(shards), "--verify"])
            err = capsys.readouterr().err.strip()
            assert "is not a plain file name inside the shard directory" in _one_line(rc, err), (where, name)
            with pytest.raises(ShardError, match="is not a plain file name inside the shard directory"):
                ShardDataset(shards, "train")  # what the trainer's loader opens
    (shards / "manifest.json").write_text(json.dumps(good))
    assert main(["inspect", str(shards), "--verify", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verify"]["ok"]
    assert len(ShardDataset(shards, "train")) > 0


def test_item15_unreachable_store_and_a_zstd_cut_in_its_first_block(data_dir: Path, tmp_path: Path) -> None:
    import zstandard
    from llmpipe.io.config import ReadConfig
    from llmpipe.io.read import records

    # (a) --out on an S3 endpoint where nothing listens: said as such, at once
    (tmp_path / "a.jsonl").write_bytes(_docs(data_dir, 0, 5))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    args = [str(tmp_path / "a.jsonl"), "--out", "s3://bucket/out", "--work-dir", str(tmp_path / "w")]
    t = time.monotonic()
    p = run_cli("curate", *args, env=env, check=False, timeout=120)
    took = time.monotonic() - t
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "cannot reach the store's endpoint" in lines[0] and "does not exist" not in lines[0]
    assert took < 30, took  # one try with a short timeout (main: retries, ~25 s on this kind of box)
    # (b) a .zst cut inside its first block is a truncated stream, not an unknown binary format
    data = (data_dir / "web" / "cc-en-head-0091.jsonl").read_bytes()
    z = zstandard.ZstdCompressor().compress(data)
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(z[: len(z) // 2])
    got = list(records(cut, ReadConfig()))
    assert [type(r).__name__ for r in got] == ["Bad"] and got[0].reason == "truncated_or_corrupt_stream"


def test_item1_out_that_is_holds_or_lies_inside_the_input_is_refused_even_with_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """export, quantize and prune replace --out whole: an --out that is the run or model being read, lies
    inside it or holds it would delete it. Refused in one line that says so, --overwrite or not."""
    run = tmp_path / "models" / "run"
    files = {
        "config.yaml": "model: {}\n",
        "checkpoints/step-2/.metadata": "meta",
        "checkpoints/step-2/__0_0.distcp": "weights",
        "config.json": "{}\n",
        "model.safetensors": "weights",
    }
    for name, text in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)
    (tmp_path / "link").symlink_to(run)
    outs = {
        run: "is the",
        run / "checkpoints": "lies inside the",
        run / "new" / "sub": "lies inside the",
        tmp_path / "models": "holds the",
        tmp_path / "link": "is the",
    }
    for command, extra in (
        ("export", []),
        ("quantize", ["--method", "int8"]),
        ("prune", ["--sparsity", "0.5"]),
    ):
        for out, how in outs.items():
            for overwrite in ([], ["--overwrite"]):
                capsys.readouterr()
                rc = main([command, str(run), *extra, "--out", str(out), *overwrite])
                err = _one_line(rc, capsys.readouterr().err.strip())
                assert f"{how} " in err and "that this command reads" in err, (command, out, err)
                assert "did not write" not in err and "pass --overwrite" not in err, err
                assert {n: (run / n).read_text() for n in files} == files
    # shards named on the command line are inputs too
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "manifest.json").write_text("{}")
    rc = main(["quantize", str(run), "--eval", str(shards), "--out", str(shards / "q"), "--overwrite"])
    assert "lies inside --eval" in _one_line(rc, capsys.readouterr().err.strip())
    assert (shards / "manifest.json").read_text() == "{}"


def test_item2_a_shard_directorys_files_do_not_lead_outside_it(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard, the tokenizer or the manifest that is a symlink to a file elsewhere is not read: the
    trainer's loader (ShardDataset) and ``inspect --verify`` stop with one line naming it."""
    import shutil

    from llmpipe.data.dataset import ShardDataset
    from llmpipe.errors import ShardError
    from llmpipe.train.byte_shards import write_byte_shards

    made = write_byte_shards(
        data_dir / "reference" / "books" / "tiny-shakespeare.txt", tmp_path / "made", max_chars=20_000
    )
    names = [n for n in ("manifest.json", "tokenizer.json", "train-00000.arrow") if (made / n).exists()]
    assert "train-00000.arrow" in names and "manifest.json" in names
    for name in names:
        shards, elsewhere = tmp_path / f"s-{name}", tmp_path / f"elsewhere-{name}"
        shutil.copytree(made, shards)
        elsewhere.mkdir()
        shutil.move(shards / name, elsewhere / name)
        (shards / name).symlink_to(elsewhere / name)
        with pytest.raises(ShardError, match=f"{name}: a symlink leading outside"):
            ShardDataset(shards, "train")
        rc = main(["inspect", str(shards), "--verify"])
        assert f"{name}: a symlink leading outside" in _one_line(rc, capsys.readouterr().err.strip())
    # a link that stays in the directory is a file of it
    shards = tmp_path / "inside"
    shutil.copytree(made, shards)
    (shards / "train-00000.arrow").rename(shards / "data")
    (shards / "train-00000.arrow").symlink_to("data")
    assert len(ShardDataset(shards, "train")) > 0


MANIFEST_DAMAGE: list[tuple[str, object, str]] = [
    # (key path, value, what the one line says) -- each once a traceback or a 256 GB allocation
    ("", [1, 2, 3], "not an llmpipe shard manifest"),
    ("seq_len", "64", 'seq_len is "64", not a whole number of tokens'),
    ("seq_len", 0, "seq_len is 0"),
    ("seq_len", (1 << 20) + 1, "seq_len is 1048577"),
    ("seq_len", True, "seq_len is true"),
    ("dtype", "int64", 'dtype is "int64", not uint16 or uint32'),
    ("tokenizer.eos_id", "x", 'tokenizer.eos_id is "x", not a token id'),
    ("tokenizer.eos_id", 257, "tokenizer.eos_id is 257, not a token id below the vocabulary size 257"),
    ("tokenizer.eos_id", -1, "tokenizer.eos_id is -1"),
    ("tokenizer.vocab_size", -1, "tokenizer.vocab_size is -1, not a whole number from 1 to 65,536"),
    ("tokenizer.vocab_size", 1_000_000_000, "tokenizer.vocab_size is 1000000000, not a whole number"),
    ("tokenizer.vocab_size", 2.5, "tokenizer.vocab_size is 2.5"),
    ("tokenizer.sha256", 5, "tokenizer.sha256 is 5, not a string"),
    ("counts", [], "counts is [], not a mapping"),
    ("splits.train.shards.0.block_bytes", 0, "splits.train.shards[0].block_bytes is 0, not a positive"),
    ("splits.train.shards.0.block_bytes", "1", 'block_bytes is "1"'),
    ("splits.train.shards.0.block_crc32", "abc", 'splits.train.shards[0].block_crc32 is "abc", not a list'),
    ("splits.train.shards.0.block_crc32", [1 << 32], "block_crc32 is [4294967296]"),
    ("splits.train.shards.0.block_crc32", None, "has one of block_bytes and block_crc32 without the other"),
    ("splits.train.shards.0.rows", -3, "splits.train.shards[0].rows is -3, not a whole number"),
    ("splits.train.shards.0.bytes", "40", 'splits.train.shards[0].bytes is "40"'),
    ("splits.train.shards.0.sha256", None, "splits.train.shards[0] has no sha256"),
    ("splits.train", 7, "splits.train is 7, not a mapping"),
]


@pytest.mark.parametrize(
    ("key", "value", "says"), MANIFEST_DAMAGE, ids=[f"{k}={v!r}"[:40] for k, v, _ in MANIFEST_DAMAGE]
)
def test_item3_a_strangers_manifest_values_are_checked_in_one_place(
    key: str, value: object, says: str, tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every manifest value a reader relies on has its type and range checked by read_manifest: one
    line naming the key from the trainer's loader, ``inspect --verify`` and ``eval --shards`` alike."""
    from llmpipe.curate import settings
    from llmpipe.data.dataset import ShardDataset
    from llmpipe.data.format import MAX_SEQ_LEN
    from llmpipe.errors import ShardError
    from llmpipe.train.byte_shards import write_byte_shards

    assert MAX_SEQ_LEN == settings.MAX_SEQ_LEN  # the packer's limit
    shards = tmp_path / "s"
    write_byte_shards(data_dir / "reference" / "books" / "tiny-shakespeare.txt", shards, max_chars=20_000)
    good = json.loads((shards / "manifest.json").read_text())
    m: object = value
    if key:
        m = json.loads(json.dumps(good))
        *path, last = key.split(".")
        at: object = m
        for k in path:
            at = at[int(k)] if isinstance(at, list) else at[k]  # type: ignore[index]
        if value is None:
            del at[last]  # type: ignore[union-attr]
        else:
            at[last] = value  # type: ignore[index]
    (shards / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ShardError, match=f"manifest.json: .*{re.escape(says)}"):
        ShardDataset(shards, "train")
    rc = main(["inspect", str(shards), "--verify"])
    assert says in _one_line(rc, capsys.readouterr().err.strip())
