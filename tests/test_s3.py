"""Curation from and to an S3-compatible store: a real moto server on 127.0.0.1 (its HTTP API, reached
through s3fs/botocore like any S3 endpoint), and the outputs compared byte for byte with a run on
local files."""

from __future__ import annotations

import gzip
import hashlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

CONFIG = (
    "pack:\n  seq_len: 128\n  samples_per_shard: 300\n  val_fraction: 0.05\n"
    "tokenizer:\n  vocab_size: 400\n  sample_bytes: 2000000\n"
)
BUCKET = "llmpipe-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 with one bucket; yields the environment that points clients at it."""
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield {**env, "_client": client}  # type: ignore[dict-item]
    finally:
        server.stop()


def _env(s3: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in s3.items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, s3: dict[str, str]) -> tuple[Path, Path]:
    """Real crawl text as a plain JSONL (with bad lines), a Parquet file of many row groups and a gzip
    WARC, in a local directory and uploaded under s3://BUCKET/in/."""
    d = tmp_path_factory.mktemp("in")
    lines = gzip.decompress(
        (data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes()
    ).splitlines()
    with open(d / "web.jsonl", "wb") as f:
        for i, line in enumerate(lines):
            f.write(line + b"\n")
            if i % 50 == 0:
                f.write(b"\n{not json\n")
    rows = [json.loads(x) for x in lines[:400]]
    (d / "sub").mkdir()
    pq.write_table(
        pa.table({"text": [r["text"] for r in rows]}), d / "sub" / "web.parquet", row_group_size=25
    )
    (d / "crawl.warc.gz").write_bytes((data_dir / "web" / "wget-crawl-0000.warc.gz").read_bytes())
    client = s3["_client"]
    for p in sorted(x for x in d.rglob("*") if x.is_file()):
        client.upload_file(str(p), BUCKET, f"in/{p.relative_to(d)}")
    cfg = d.parent / "cfg.yaml"
    cfg.write_text(CONFIG)
    return d, cfg


def _tree(out: Path) -> dict[str, str]:
    """Every output file's sha256; the done marker aside (its fingerprint covers the inputs' mtimes,
    which differ between a disk and a store)."""
    assert (out / ".llmpipe-done.json").is_file()
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.is_file() and p.name != ".llmpipe-done.json"
    }


def _download(s3: dict[str, str], prefix: str, dest: Path) -> Path:
    client = s3["_client"]
    dest.mkdir(parents=True)
    for obj in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/").get("Contents", []):
        client.download_file(BUCKET, obj["Key"], str(dest / obj["Key"][len(prefix) + 1 :]))
    return dest


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
    inputs: tuple[Path, Path], local_ref: dict[str, str], s3: dict[str, str], tmp_path: Path
) -> None:
    _, cfg = inputs
    env = _env(s3)
    work = tmp_path / "staging"
    log = _curate(
        f"s3://{BUCKET}/in", f"s3://{BUCKET}/out", cfg, env, "--workers", "2", "--chunk-mb", "0.5",
        "--work-dir", str(work),
    )  # fmt: skip
    assert "uploaded" in log
    assert not work.exists()  # the staging directory goes once the outputs are on the store
    got = _download(s3, "out", tmp_path / "got")
    tree = _tree(got)
    assert tree == local_ref
    assert {"manifest.json", "stats.json", "report.html", "quarantine.jsonl", "tokenizer.json"} <= set(tree)
    assert sum(n.startswith("train-") for n in tree) >= 2
    stats = json.loads((got / "stats.json").read_text())
    assert stats["inputs"]["files"] == 3

    # the same command again finds the run complete on the store and uploads nothing
    before = {
        o["Key"]: o["LastModified"]
        for o in s3["_client"].list_objects_v2(Bucket=BUCKET, Prefix="out/")["Contents"]  # type: ignore[attr-defined]
    }
    time.sleep(1.0)  # LastModified has one-second resolution
    log = _curate(f"s3://{BUCKET}/in", f"s3://{BUCKET}/out", cfg, env, "--work-dir", str(work))
    assert "already complete" in log
    after = {
        o["Key"]: o["LastModified"]
        for o in s3["_client"].list_objects_v2(Bucket=BUCKET, Prefix="out/")["Contents"]  # type: ignore[attr-defined]
    }
    assert after == before


def test_s3_input_to_local_out(
    inputs: tuple[Path, Path], local_ref: dict[str, str], s3: dict[str, str], tmp_path: Path
) -> None:
    _, cfg = inputs
    out = tmp_path / "out"
    _curate(f"s3://{BUCKET}/in", str(out), cfg, _env(s3), "--workers", "1", "--chunk-mb", "0.2")
    assert _tree(out) == local_ref


def test_missing_bucket_is_one_line(inputs: tuple[Path, Path], s3: dict[str, str], tmp_path: Path) -> None:
    _, cfg = inputs
    for args in (
        ["s3://no-such-bucket/in", "--out", str(tmp_path / "o")],
        [str(inputs[0]), "--out", "s3://no-such-bucket/out", "--work-dir", str(tmp_path / "w")],
    ):
        p = run_cli("curate", *args, "--config", str(cfg), env=_env(s3), check=False, timeout=120)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "no-such-bucket" in lines[0] and "Traceback" not in p.stderr, p.stderr
