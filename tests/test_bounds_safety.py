"""Files from strangers stay bounded in memory and time (issue 28, items 7-10).

Each test builds its hostile input here: zstd made of RLE blocks, a Parquet row group that repeats one
dictionary entry, documents whose texts overflow one Arrow array, a page of 100,000 nested ``<div>``
and fastText models with forged counts. ``llmpipe curate`` runs on each as a user would.
"""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from conftest import run_cli
from llmpipe.errors import InputError
from llmpipe.io.config import ARROW_STRING_LIMIT, ReadConfig
from llmpipe.io.parquet import read_parquet
from llmpipe.io.read import read_input
from llmpipe.quality import FastTextModel

#: every stage that judges text is off: these tests are about reading, not filtering
QUIET = (
    "pack: {seq_len: 64, samples_per_shard: 100, val_fraction: 0.0}\n"
    "tokenizer: {vocab_size: 300, sample_bytes: 200000}\n"
    + "".join(
        f"{s}: {{enabled: false}}\n"
        for s in ("language", "gopher_repetition", "gopher_quality", "c4", "fineweb", "length")
    )
)
RSS_LIMIT = 500 << 20

#: runs a command, polls the resident memory of it and its children (killing it past 3x the limit, so
#: that an unbounded reader fails fast), and prints the largest child's peak RSS (getrusage) in bytes
_WATCH = r"""
import os, resource, subprocess, sys, time
limit = int(sys.argv[1])
p = subprocess.Popen(sys.argv[2:])
def rss(pid):
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            total = next((int(l.split()[1]) << 10 for l in f if l.startswith("VmRSS:")), 0)
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                total = max(total, max((rss(int(c)) for c in f.read().split()), default=0))
    except (OSError, ValueError):
        pass
    return total
killed = False
while p.poll() is None:
    if rss(p.pid) > 3 * limit:
        p.kill(); killed = True
    time.sleep(0.02)
print("RSS", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss << 10, p.returncode, killed, flush=True)
"""


def _curate_watched(inputs: list[Path], out: Path, cfg: Path) -> tuple[int, int, str]:
    """(peak RSS of the largest process, exit code, stderr) of ``llmpipe curate``."""
    exe = str(Path(sys.executable).with_name("llmpipe"))
    cmd = [exe, "curate", *map(str, inputs), "--out", str(out), "--config", str(cfg), "--workers", "1"]
    proc = subprocess.run(
        [sys.executable, "-c", _WATCH, str(RSS_LIMIT), *cmd], capture_output=True, text=True, timeout=300
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RSS "))
    _, peak, code, killed = line.split()
    assert killed == "False", f"curate passed {3 * RSS_LIMIT >> 20} MB and was killed:\n{proc.stderr[-2000:]}"
    return int(peak), int(code), proc.stderr


def _rle_zstd(blocks: int, byte: bytes) -> bytes:
    """One zstd frame of ``blocks`` RLE blocks of 128 KiB each: 4 bytes per block on disk."""
    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # magic, frame header, a 128 KiB window
    for i in range(blocks):
        out += ((i == blocks - 1) | 2 | (128 << 10) << 3).to_bytes(3, "little") + byte
    return bytes(out)


def _real_lines(data_dir: Path, n: int) -> bytes:
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rb") as f:
        return b"".join(next(f) for _ in range(n))


def _stage(stats: dict, name: str) -> dict:
    return next(s for s in stats["stages"] if s["name"] == name)


def _quarantined(out: Path) -> list[dict]:
    q = out / "quarantine.jsonl"
    return [json.loads(x) for x in q.read_text().splitlines()] if q.exists() else []


def test_item7_zstd_and_parquet_bombs_stay_bounded(data_dir: Path, tmp_path: Path) -> None:
    """A 32 KB zstd file of RLE blocks (1 GiB of one byte, one line) and a 6 KB Parquet file whose one
    row group repeats a 200 KB dictionary entry 2,500 times (500 MB of text): curate stays under 500 MB
    and finishes, the bombs quarantined as too large, every record counted."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "good.jsonl").write_bytes(_real_lines(data_dir, 60))
    bomb = _rle_zstd(8192, b"a")
    assert len(bomb) < 33_000
    (src / "bomb.jsonl.zst").write_bytes(bomb)
    entry = ("lorem ipsum " * 17_000)[:200_000]
    pq.write_table(
        pa.table({"id": [f"r{i}" for i in range(2500)], "text": [entry] * 2500}),
        src / "bomb.parquet",
        row_group_size=2500,
        compression="zstd",
    )
    assert (src / "bomb.parquet").stat().st_size < 400_000
    cfg = tmp_path / "run.yaml"
    cfg.write_text(QUIET + "read: {max_doc_bytes: 100000}\n")
    out = tmp_path / "out"
    peak, code, err = _curate_watched([src], out, cfg)
    assert code == 0, err
    assert peak < RSS_LIMIT, f"peak RSS {peak >> 20} MB"
    print(f"curate on the bombs: peak RSS {peak >> 20} MB")
    read = _stage(json.loads((out / "stats.json").read_text()), "read")
    assert read["docs_in"] == 60 + 1 + 2500
    assert read["docs_out"] == 60
    assert read["dropped"] == {"quarantined_document_too_large": 2501}
    bad = _quarantined(out)
    assert sum(1 for b in bad if b["source"].endswith("bomb.parquet")) == 2500
    zst = [b for b in bad if b["source"].endswith("bomb.jsonl.zst")]
    assert len(zst) == 1 and zst[0]["location"] == "line 1", zst
    # the Parquet reader alone on a bomb of many small rows: slices, never the whole row group
    small = tmp_path / "small.parquet"
    pq.write_table(pa.table({"text": ["x" * 1000] * 100_000}), small, row_group_size=100_000)
    before, peak_arrow, n = pa.total_allocated_bytes(), 0, 0
    for _ in read_parquet(small):
        n += 1
        if n % 1000 == 0:
            peak_arrow = max(peak_arrow, pa.total_allocated_bytes() - before)
    assert n == 100_000
    assert peak_arrow < 8 << 20, f"{peak_arrow >> 20} MB of Arrow memory for 100 MB of text"


def test_item8_batches_are_cut_by_bytes(data_dir: Path, tmp_path: Path) -> None:
    """Documents that together overflow one Arrow string array are handed on in batches cut by bytes;
    the cut is a config key (``read.max_batch_bytes``), its default far below 2 GiB, and a run cut at a
    small value writes the same shards as one that is not cut."""
    default = ReadConfig()
    assert default.max_doc_bytes + default.max_batch_bytes < ARROW_STRING_LIMIT
    with pytest.raises(ValueError, match="max_batch_bytes"):
        ReadConfig(max_doc_bytes=2_000_000_000, max_batch_bytes=200_000_000)
    # real documents read with a 64 KB cut: no batch passes it by more than its last document
    lines = _real_lines(data_dir, 300)
    src = tmp_path / "docs.jsonl.zst"
    src.write_bytes(zstandard.ZstdCompressor().compress(lines))
    cut = ReadConfig(max_batch_bytes=64_000)
    for block in (0, 4 << 20):  # the line-by-line reader and the compiled one cut alike
        batches = [
            b for b in read_input(src, "docs", cut, jsonl_block=block) if isinstance(b, pa.RecordBatch)
        ]
        texts = [[len(t.encode()) for t in b.column("text").to_pylist()] for b in batches]
        for t in texts[:-1]:  # each batch ends with the document that brings it to the cut
            assert sum(t[:-1]) < 64_000 <= sum(t), t
        assert sum(texts[-1]) < 64_000 + max(texts[-1])
        assert sum(map(len, texts)) == 300 and len(texts) > 10
    # a run whose batches are cut writes the shards of one that is not
    shards = {}
    for name, extra in (("whole", ""), ("cut", "read: {max_batch_bytes: 50000}\n")):
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(QUIET.replace("language: {enabled: false}\n", "") + extra)
        run_cli("curate", str(src), "--out", str(tmp_path / name), "--config", str(cfg))
        shards[name] = {p.name: p.read_bytes() for p in sorted((tmp_path / name).glob("*.arrow"))}
    assert shards["whole"] and shards["whole"] == shards["cut"]


def _warc_record(uri: str, html: bytes) -> bytes:
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + html
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Target-URI: {uri}\r\nWARC-Date: 2026-11-25T00:00:00Z\r\n"
        "WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000028>\r\n"
        f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n"
    )
    return head.encode() + http + b"\r\n\r\n"


def test_item9_deep_html_is_dropped_before_extraction(data_dir: Path, tmp_path: Path) -> None:
    """A WARC with a page of 100,000 nested <div> beside a real page: curate takes seconds, the deep
    page is dropped as html_too_deep, the real one extracted and kept."""
    real = gzip.decompress((data_dir / "web" / "cc-main-2024-22-page.warc.gz").read_bytes())
    deep = b"<html><body>" + b"<div>" * 100_000 + b"deep text " * 20 + b"</div>" * 100_000 + b"</body></html>"
    assert len(deep) > 1_100_000
    (tmp_path / "crawl.warc").write_bytes(real + _warc_record("https://example.org/deep", deep))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(QUIET)
    out = tmp_path / "out"
    t = time.monotonic()
    run_cli("curate", str(tmp_path / "crawl.warc"), "--out", str(out), "--config", str(cfg), timeout=120)
    assert time.monotonic() - t < 60
    ext = _stage(json.loads((out / "stats.json").read_text()), "extract")
    assert ext["docs_in"] == 2 and ext["docs_out"] == 1, ext
    assert ext["dropped"] == {"html_too_deep": 1}, ext
    # the limit is a typed config key, checked when the config is read
    with pytest.raises(ValueError, match="max_html_depth"):
        ReadConfig(max_html_depth=0)


def _tiny_fasttext(tmp: Path) -> bytes:
    from fasttext_oracle import train_supervised
    from test_fasttext_parity import TRAIN

    train = tmp / "train.txt"
    train.write_text("".join(f"__label__{'ab'[i % 2]} word{i % 7} text{i % 3} more\n" for i in range(60)))
    model = train_supervised(input=str(train), dim=4, bucket=1000, minn=2, maxn=3, **{**TRAIN, "epoch": 1})
    model.save_model(str(tmp / "ok.bin"))
    return (tmp / "ok.bin").read_bytes()


def test_item10_forged_fasttext_models_give_one_error_line(data_dir: Path, tmp_path: Path) -> None:
    """fastText models with forged counts (a dictionary of 2^31 entries: the 64 GiB allocation that
    aborted; a pruned index of 2^60 entries: the panic; more n-gram buckets than input rows: a panic at
    prediction; a truncated file): curate exits 2 with one ``error:`` line naming the file."""
    good = _tiny_fasttext(tmp_path)
    (tmp_path / "docs.jsonl").write_bytes(_real_lines(data_dir, 20))

    def forged(at: int, fmt: str, *values: int) -> bytes:
        b = bytearray(good)
        struct.pack_into(fmt, b, at, *values)
        return bytes(b)

    models = {
        "dictionary.bin": forged(64, "<iii", 2**31 - 1, 2**31 - 2, 1),
        "pruneidx.bin": forged(84, "<q", 2**60),
        "bucket.bin": forged(40, "<i", 2**30),
        "truncated.bin": good[: len(good) // 2],
    }
    for name, data in models.items():
        (tmp_path / name).write_bytes(data)
    # in this process: one line, never a panic (a PanicException is no InputError)
    for name in ("pruneidx.bin", "truncated.bin", "bucket.bin"):
        with pytest.raises(InputError) as e:
            FastTextModel.load(str(tmp_path / name))
        assert name in str(e.value) and "\n" not in str(e.value)
    # curate as a user runs it (the 64 GiB allocation aborted the process: only a subprocess can tell)
    for name, stage in (
        ("dictionary.bin", "language: {backend: fasttext, model: %s}\n"),
        ("bucket.bin", "quality_model: {enabled: true, model: %s, format: fasttext, label: __label__a}\n"),
    ):
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(QUIET.replace("language: {enabled: false}\n", "") + stage % (tmp_path / name))
        proc = run_cli(
            "curate", str(tmp_path / "docs.jsonl"), "--out", str(tmp_path / f"out-{name}"), "--config", str(cfg),
            check=False, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 2, (name, proc.returncode, proc.stderr[-2000:])
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("llmpipe: error:") and name in lines[0], (
            name,
            proc.stderr,
        )
        assert "Traceback" not in proc.stderr and "panicked" not in proc.stderr
