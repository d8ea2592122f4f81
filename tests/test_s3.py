"""Curation from and to an S3-compatible store (a real moto server on 127.0.0.1, see s3server.py): the
outputs are compared byte for byte with a run on the same files on local disk."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli, write_crawl_inputs
from s3server import S3Server, s3_server

CONFIG = (
    "pack:\n  seq_len: 128\n  samples_per_shard: 300\n  val_fraction: 0.05\n"
    "tokenizer:\n  vocab_size: 400\n  sample_bytes: 2000000\n"
)
DONE = ".llmpipe-done.json"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, s3: S3Server) -> tuple[Path, Path]:
    """Real crawl text as a plain JSONL (with bad lines), a Parquet file of many row groups in a
    sub-directory and a gzip WARC, on local disk and uploaded under s3://BUCKET/in/."""
    d = tmp_path_factory.mktemp("in")
    write_crawl_inputs(d, data_dir, parquet="sub/web.parquet")
    s3.upload_tree(d, "in")
    cfg = d.parent / "cfg.yaml"
    cfg.write_text(CONFIG)
    return d, cfg


def _tree(out: Path) -> dict[str, str]:
    """Every output file's sha256, the done marker aside (its fingerprint covers the inputs' mtimes,
    which differ between a disk and a store)."""
    assert (out / DONE).is_file()
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.is_file() and p.name != DONE
    }


def _curate(inp: str, out: str, cfg: Path, env: dict[str, str], *extra: str) -> str:
    p = run_cli("curate", inp, "--out", out, "--config", str(cfg), "--quiet", *extra, env=env, timeout=300)
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def local_ref(inputs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d, cfg = inputs
    out = tmp_path_factory.mktemp("ref") / "out"
    _curate(str(d), str(out), cfg, {}, "--workers", "1", "--chunk-mb", "0.5")
    return _tree(out)


def test_s3_to_s3_gives_the_bytes_of_a_local_run(
    inputs: tuple[Path, Path], local_ref: dict[str, str], s3: S3Server, tmp_path: Path
) -> None:
    _, cfg = inputs
    src, dst = f"s3://{s3.bucket}/in", f"s3://{s3.bucket}/out"
    work = tmp_path / "staging"
    log = _curate(src, dst, cfg, s3.env, "--workers", "2", "--chunk-mb", "0.5", "--work-dir", str(work))
    assert "in 10 part(s)" in log  # the remote JSONL and Parquet files ran as chunks
    assert "uploaded 7 shard(s)" in log
    assert not work.exists()  # the staging directory goes once the outputs are on the store
    got = s3.download_tree("out", tmp_path / "got")
    assert _tree(got) == local_ref
    assert {"manifest.json", "stats.json", "report.html", "quarantine.jsonl", "tokenizer.json"} <= set(
        local_ref
    )
    assert json.loads((got / "stats.json").read_text())["inputs"]["files"] == 3

    # the same command again finds the run complete on the store and writes nothing
    before = s3.listing("out")
    time.sleep(1.0)  # LastModified has one-second resolution
    log = _curate(src, dst, cfg, s3.env, "--work-dir", str(work))
    assert "already complete" in log
    assert s3.listing("out") == before


def test_rerun_after_a_crash_mid_upload_publishes_the_same_bytes(
    inputs: tuple[Path, Path], local_ref: dict[str, str], s3: S3Server, tmp_path: Path
) -> None:
    """Killed after the first shard's upload: no manifest and no done marker on the store; the re-run
    finds its finished staging directory and uploads it, with the same bytes."""
    _, cfg = inputs
    src, dst = f"s3://{s3.bucket}/in", f"s3://{s3.bucket}/crash"
    work = tmp_path / "staging"
    args = ("curate", src, "--out", dst, "--config", str(cfg), "--quiet", "--workers", "1")
    p = run_cli(
        *args, "--work-dir", str(work), env={**s3.env, "LLMPIPE_FAULT_AFTER": "uploaded train-00000.arrow"},
        check=False, timeout=300,
    )  # fmt: skip
    assert p.returncode == -9, p.stderr
    keys = {k.rsplit("/", 1)[-1] for k in s3.keys("crash")}
    assert keys == {"train-00000.arrow"}, keys  # no manifest, no marker: nothing claims completeness
    assert (work / DONE).is_file()  # the run itself had finished in the staging directory
    log = _curate(src, dst, cfg, s3.env, "--workers", "1", "--work-dir", str(work))
    assert "already complete" in log and "uploaded" in log  # staging complete -> only the upload
    assert _tree(s3.download_tree("crash", tmp_path / "got")) == local_ref


def test_s3_input_to_local_out(
    inputs: tuple[Path, Path], local_ref: dict[str, str], s3: S3Server, tmp_path: Path
) -> None:
    _, cfg = inputs
    out = tmp_path / "out"
    _curate(f"s3://{s3.bucket}/in", str(out), cfg, s3.env, "--workers", "1", "--chunk-mb", "0.2")
    assert _tree(out) == local_ref


def test_missing_bucket_key_or_credentials_is_one_line(
    inputs: tuple[Path, Path], s3: S3Server, tmp_path: Path
) -> None:
    d, cfg = inputs
    # no credentials anywhere: the environment's and the profile files' are out of reach
    anonymous = {k: "" for k in s3.env if k != "AWS_ENDPOINT_URL"} | {
        "AWS_ENDPOINT_URL": s3.env["AWS_ENDPOINT_URL"],
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    src = f"s3://{s3.bucket}/in"
    for args, env, says in (
        (["s3://no-such-bucket/in", "--out", str(tmp_path / "o")], s3.env, "bucket does not exist"),
        ([f"{src}/nothing-here", "--out", str(tmp_path / "o")], s3.env, "no such file or directory"),
        (
            [str(d), "--out", "s3://no-such-bucket/out", "--work-dir", str(tmp_path / "w")],
            s3.env,
            "does not exist",
        ),
        ([src, "--out", str(tmp_path / "o")], anonymous, "NoCredentialsError"),
    ):
        p = run_cli("curate", *args, "--config", str(cfg), env=env, check=False, timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and says in lines[0], p.stderr
        assert "Traceback" not in p.stderr


def test_a_store_failing_mid_read_stops_the_read(
    inputs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost connection is not a corrupt file: the readers quarantine the rest of a file on an
    OSError, so a store's failure is an InputError that stops the run (a re-run resumes)."""
    from llmpipe.errors import InputError
    from llmpipe.io import fs
    from llmpipe.io.jsonl import read_jsonl
    from llmpipe.io.parquet import read_parquet

    d, _ = inputs
    monkeypatch.setattr(fs, "BLOCK", 1 << 16)  # many range reads per file
    with s3_server("llmpipe-flaky") as s3:
        for k, v in s3.env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore gives up at once (s3fs still retries)
        s3.upload_tree(d, "in")
        url = f"s3://{s3.bucket}/in/"
        docs, rows = (
            read_jsonl(fs.RemotePath(url + "web.jsonl")),
            read_parquet(fs.RemotePath(url + "sub/web.parquet")),
        )
        assert next(docs).text and next(rows).text  # reading while the store is up; then it stops
    with pytest.raises(InputError, match=r"s3://llmpipe-flaky/in/web.jsonl: reading failed"):
        for _ in docs:
            pass
    with pytest.raises(InputError, match=r"s3://llmpipe-flaky/in/sub/web.parquet: reading failed"):
        for _ in rows:
            pass
