"""Every kind of bad input is counted and quarantined with its reason and location; the run goes on.

Inputs are built here from the real data: a gzip cut in half, a real truncated WARC, JSON lines with
broken records in the middle of real ones, random bytes, an empty file and a single 100 MB document.
"""

from __future__ import annotations

import bz2
import gzip
import json
import random
import shutil
import subprocess
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import run_cli
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.steps import read_documents
from llmpipe.errors import InputError
from llmpipe.io.config import ReadConfig
from llmpipe.io.fs import as_input
from llmpipe.io.jsonl import read_jsonl
from llmpipe.io.records import Bad, Doc

SMALL = (
    "pack:\n  seq_len: 64\n  samples_per_shard: 100\n  val_fraction: 0.0\n"
    "tokenizer:\n  vocab_size: 400\n  sample_bytes: 200000\n"
)
BIG = 100 * 1024 * 1024


def _real_lines(data_dir: Path, n: int) -> list[bytes]:
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rb") as f:
        return [next(f) for _ in range(n)]


#: Python's own decompressors, one per stream (a gzip file may hold several)
_DECOMPRESSOR: dict[str, Callable[[], Any]] = {
    "gz": lambda: zlib.decompressobj(wbits=31),
    "bz2": bz2.BZ2Decompressor,
    "zst": lambda: zstandard.ZstdDecompressor().decompressobj(),
}
_COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gz": gzip.compress,
    "bz2": lambda b: bz2.compress(b, 1),  # blocks of 100 kB: a cut keeps the blocks before it
    "zst": lambda b: zstandard.ZstdCompressor().compress(b),
}


def _recoverable(data: bytes, kind: str) -> bytes:
    """What Python's own decompressor gives of the compressed ``data``, fed 4 KB at a time, until
    the stream ends or breaks off (the oracle for a file cut short)."""
    out: list[bytes] = []
    d = _DECOMPRESSOR[kind]()
    for i in range(0, len(data), 4096):
        piece = data[i : i + 4096]
        while piece:
            try:
                out.append(d.decompress(piece))
            except (zlib.error, OSError, EOFError, zstandard.ZstdError):
                return b"".join(out)
            piece = b""
            if d.eof:  # the next stream (gzip members) starts after it
                piece, d = d.unused_data, _DECOMPRESSOR[kind]()
    return b"".join(out)


def _complete_lines(data: bytes, kind: str) -> int:
    return _recoverable(data, kind).count(b"\n")


def make_bad_inputs(data_dir: Path, root: Path) -> dict[str, tuple[str, int]]:
    """Write one file per kind of bad input; returns file -> (expected reason, good records in it)."""
    root.mkdir(parents=True, exist_ok=True)
    good = _real_lines(data_dir, 6)
    lines = [
        good[0],
        b'{"id": "u1", "text": "caf\xe9 \xff\xfe not utf-8"}\n',  # undecodable bytes
        good[1],
        b'{"id": "j1", "text": "unterminated\n',  # JSON that does not parse
        good[2],
        b'{"id": "m1", "body": "no text field here"}\n',  # a missing text field
        good[3],
    ]
    (root / "mixed.jsonl").write_bytes(b"".join(lines))
    # a gzip stream cut in the middle: the records before the cut are kept
    full = gzip.compress(b"".join(_real_lines(data_dir, 40)))
    (root / "cut.jsonl.gz").write_bytes(full[: len(full) // 2])
    shutil.copy(data_dir / "web" / "truncated-record.warc.gz", root / "truncated-record.warc.gz")
    (root / "empty.jsonl").write_bytes(b"")
    (root / "junk.bin").write_bytes(random.Random(8).randbytes(50_000))
    with open(root / "huge.jsonl", "wb") as f:  # one 100 MB document between two good ones
        f.write(good[4])
        f.write(b'{"id": "big", "text": "')
        block = b"lorem ipsum dolor sit amet " * 40_000
        for _ in range(BIG // len(block) + 1):
            f.write(block)
        f.write(b'"}\n')
        f.write(good[5])
    return {
        "mixed.jsonl": ("undecodable_bytes invalid_json missing_text_field", 4),
        "cut.jsonl.gz": ("truncated_or_corrupt_stream", _complete_lines(full[: len(full) // 2], "gz")),
        "truncated-record.warc.gz": ("truncated_record", 0),
        "empty.jsonl": ("empty_file", 0),
        "junk.bin": ("unsupported_format_binary", 0),
        "huge.jsonl": ("document_too_large", 2),
    }


def test_files_no_reader_takes_say_what_they_seem_to_be(data_dir: Path, tmp_path: Path) -> None:
    """UTF-16 text and archives of files are quarantined with what they are and what to do."""
    text = gzip.decompress((data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes())[:5000]
    (tmp_path / "notes.txt").write_bytes(text.decode("utf-8", "replace").encode("utf-16"))
    (tmp_path / "a.jsonl").write_bytes(text.rsplit(b"\n", 1)[0] + b"\n")
    with tarfile.open(tmp_path / "crawl.tar.gz", "w:gz") as t:
        t.add(tmp_path / "a.jsonl", "a.jsonl")
    with zipfile.ZipFile(tmp_path / "crawl.zip", "w") as z:
        z.write(tmp_path / "a.jsonl", "a.jsonl")
    (tmp_path / "junk.bin").write_bytes(random.Random(8).randbytes(5_000))
    for name, says in (
        ("notes.txt", "UTF-16 text (it starts with a UTF-16 byte order mark): convert it to UTF-8"),
        ("crawl.tar.gz", "a tar archive: unpack it and name its files or its directory"),
        ("crawl.zip", "a zip archive: unpack it"),
        ("junk.bin", "not JSONL, Parquet, WARC/ARC or UTF-8 text"),
    ):
        bad: list[Bad] = []
        assert not list(read_documents(tmp_path / name, name, ReadConfig(), bad.append)), name
        assert [b.reason for b in bad] == ["unsupported_format_binary"], (name, bad)
        assert says in bad[0].detail, (name, bad[0].detail)


def test_readers_quarantine_each_kind(data_dir: Path, tmp_path: Path) -> None:
    expected = make_bad_inputs(data_dir, tmp_path)
    for name, (reasons, n_good) in expected.items():
        bad: list[Bad] = []
        read, extract = StageCounts("read"), StageCounts("extract")
        rows = sum(
            b.num_rows for b in read_documents(tmp_path / name, name, ReadConfig(), bad.append, read, extract)
        )
        assert sorted(b.reason for b in bad) == sorted(reasons.split()), name
        assert all(b.location for b in bad), name
        assert rows == n_good, name  # the cut gzip: every line before the cut
    # locations point at the record
    bad = []
    list(read_documents(tmp_path / "mixed.jsonl", "m", ReadConfig(), bad.append))
    assert [(b.reason, b.location) for b in bad] == [
        ("undecodable_bytes", "line 2"),
        ("invalid_json", "line 4"),
        ("missing_text_field", "line 6"),
    ]


def test_truncated_warc_cut_between_records(data_dir: Path, tmp_path: Path) -> None:
    """A gzip WARC cut inside a record's header: FastWARC stops quietly, the reader reports the cut."""
    data = (data_dir / "web" / "cc-main-2020-34-excerpt.warc.gz").read_bytes()
    members, pos = [], 0
    import zlib

    while pos < len(data):
        d = zlib.decompressobj(wbits=31)
        d.decompress(data[pos:])
        members.append(pos)
        pos = len(data) - len(d.unused_data)
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(data[: members[10] + 15])  # 10 whole records, then 15 bytes of the 11th
    bad: list[Bad] = []
    read = StageCounts("read")
    list(read_documents(cut, "cut", ReadConfig(), bad.append, read, StageCounts("extract")))
    assert [b.reason for b in bad] == ["truncated_or_corrupt_stream"]
    assert read.docs_in == 11 and read.dropped["quarantined_truncated_or_corrupt_stream"] == 1
    # plain (uncompressed) WARC cut inside a header
    raw = gzip.decompress(data)
    second = raw.index(b"WARC/1.0", 10)
    plain = tmp_path / "cut.warc"
    plain.write_bytes(raw[: second + 20])
    bad = []
    read = StageCounts("read")
    list(read_documents(plain, "cut", ReadConfig(), bad.append, read, StageCounts("extract")))
    assert [b.reason for b in bad] == ["truncated_or_corrupt_stream"]
    # FastWARC hands out the cut header as a record with no Content-Length: counted once, as the cut
    # (not also as a skipped record of unknown type)
    assert read.docs_in == 2 and read.dropped == {
        "skipped_warcinfo_record": 1,
        "quarantined_truncated_or_corrupt_stream": 1,
    }


def _peak_rss_mb(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def test_huge_document_is_never_held_in_memory(data_dir: Path, tmp_path: Path) -> None:
    make_bad_inputs(data_dir, tmp_path)
    # a WARC with one 100 MB HTML response next to a real one
    warc = tmp_path / "huge.warc"
    real = gzip.decompress((data_dir / "web" / "cc-main-2024-22-page.warc.gz").read_bytes())
    body = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html><body>" + b"<p>x</p>" * (BIG // 8)
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000001>\r\n"
        "WARC-Target-URI: http://example.com/big\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
        f"Content-Type: application/http;msgtype=response\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with open(warc, "wb") as f:
        f.write(real)
        f.write(head.encode() + body + b"\r\n\r\n")
        f.write(real)
    template = (
        "import re; from pathlib import Path; from llmpipe.curate.steps import read_documents\n"
        "from llmpipe.io.config import ReadConfig\n"
        "bad = []\n"
        "n = sum(b.num_rows for b in read_documents(Path({p!r}), 'x', ReadConfig(), bad.append))\n"
        "assert [b.reason for b in bad] == {want!r}, bad\n"
        # VmHWM, not ru_maxrss: the latter survives exec and would report the (big) parent's peak
        "print(int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)) / 1024)\n"
    )
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"".join(_real_lines(data_dir, 3)))
    base = _peak_rss_mb(template.format(p=str(small), want=[]))
    for path in (tmp_path / "huge.jsonl", warc):
        peak = _peak_rss_mb(template.format(p=str(path), want=["document_too_large"]))
        print(path.name, f"peak RSS {peak:.0f} MB, baseline {base:.0f} MB")
        assert peak - base < 40, (path.name, peak, base)  # far below the 100 MB document


def test_strict_fails_on_the_first_bad_record(data_dir: Path, tmp_path: Path) -> None:
    make_bad_inputs(data_dir, tmp_path / "in")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SMALL)
    p = run_cli(
        "curate", str(tmp_path / "in" / "mixed.jsonl"), "--out", str(tmp_path / "o"), "--config", str(cfg),
        "--strict", check=False,
    )  # fmt: skip
    assert p.returncode != 0
    assert "mixed.jsonl" in p.stderr and "undecodable_bytes" in p.stderr and "--strict" in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_strict_names_the_first_bad_record_in_input_order(tmp_path: Path) -> None:
    """Two workers, two bad inputs: the second input's bad record (its first line) is found first, the
    first input's (its last line) later; the error is the first in input order, every time."""
    raw = tmp_path / "raw"
    raw.mkdir()
    good = json.dumps({"text": "a line of words " * 40})
    (raw / "a.jsonl").write_text("\n".join([good] * 5000 + ["{not json"]) + "\n")
    (raw / "b.jsonl").write_text("{not json either\n" + good + "\n")
    chunk_mb = str(((raw / "a.jsonl").stat().st_size + 100) / 2**20)  # a part each: a's, then b's
    p = run_cli(
        "curate", str(raw), "--out", str(tmp_path / "o"), "--strict", "--quiet", "--workers", "2",
        "--chunk-mb", chunk_mb, check=False,
    )  # fmt: skip
    err = p.stderr.strip()
    assert p.returncode == 2 and err.startswith("llmpipe: error:") and "\n" not in err, p.stderr
    assert "a.jsonl: line 5001" in err, err


@pytest.fixture(scope="module")
def curated_bad(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bad")
    make_bad_inputs(data_dir, root / "in")
    # a good crawl file beside the bad ones, so there is something to train on and pack
    shutil.copy(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", root / "in" / "good.jsonl.gz")
    cfg = root / "c.yaml"
    cfg.write_text(SMALL)
    run_cli("curate", str(root / "in"), "--out", str(root / "out"), "--config", str(cfg))
    return root / "in", root / "out"


def test_run_goes_on_and_quarantines(curated_bad: tuple[Path, Path]) -> None:
    _, out = curated_bad
    q = [json.loads(line) for line in (out / "quarantine.jsonl").read_text().splitlines()]
    got = sorted((r["source"], r["reason"]) for r in q)
    assert got == sorted(
        [
            ("mixed.jsonl", "undecodable_bytes"),
            ("mixed.jsonl", "invalid_json"),
            ("mixed.jsonl", "missing_text_field"),
            ("cut.jsonl.gz", "truncated_or_corrupt_stream"),
            ("truncated-record.warc.gz", "truncated_record"),
            ("empty.jsonl", "empty_file"),
            ("junk.bin", "unsupported_format_binary"),
            ("huge.jsonl", "document_too_large"),
        ]
    )
    assert all(r["location"] and r["detail"] is not None for r in q)
    assert (out / "manifest.json").is_file()


def test_funnel_adds_up_with_quarantine(curated_bad: tuple[Path, Path]) -> None:
    _, out = curated_bad
    stats = json.loads((out / "stats.json").read_text())
    for s in stats["stages"]:
        assert s["docs_in"] == s["docs_out"] + sum(s["dropped"].values()), s["name"]
    for a, b in zip(stats["stages"], stats["stages"][1:], strict=False):
        assert a["docs_out"] == b["docs_in"], (a["name"], b["name"])
    read = stats["stages"][0]
    assert read["name"] == "read"
    quarantined = {
        k.removeprefix("quarantined_"): v for k, v in read["dropped"].items() if k.startswith("quarantined_")
    }
    assert sum(quarantined.values()) == stats["quarantine"]["records"] == 8
    assert quarantined == stats["quarantine"]["by_reason"]


# -- issue 21: cuts and corruption that used to go unreported --------------------------------------


def _read(path: Path) -> tuple[StageCounts, list[Bad], int]:
    """(read counts, quarantined records included, bad records, documents)."""
    read, bad = StageCounts("read"), []
    batches = list(read_documents(path, path.name, ReadConfig(), bad.append, read, StageCounts("extract")))
    read.check()
    return read, bad, sum(b.num_rows for b in batches)


def _warc_spans(raw: bytes) -> list[tuple[int, int]]:
    """(start, end of content) of each record of an uncompressed WARC, by its Content-Length."""
    import re

    spans, pos = [], 0
    while (s := raw.find(b"WARC/1.0\r\n", pos)) >= 0:
        e = raw.index(b"\r\n\r\n", s)
        n = int(re.search(rb"(?im)^content-length:\s*(\d+)", raw[s:e]).group(1))  # type: ignore[union-attr]
        spans.append((s, e + 4 + n))
        pos = e + 4 + n
    return spans


def test_warc_cut_in_any_record_is_reported_once(data_dir: Path, tmp_path: Path) -> None:
    """A cut inside a request/metadata record (whose body is never read) or inside a header is one
    quarantined record; every record before it is counted once, in plain and gzip WARC."""
    import zlib

    data = (data_dir / "web" / "cc-main-2020-34-excerpt.warc.gz").read_bytes()
    # the reproduction: 60,800 bytes end inside the 20th record (a request)
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(data[:60_800])
    read, bad, docs = _read(cut)
    assert docs == 6 and len(bad) == 1 and bad[0].reason.startswith("truncated")
    assert read.docs_in == 20
    with pytest.raises(InputError, match="truncated"):  # what --strict does with it
        list(read_documents(cut, "cut", ReadConfig(), _strict, None, None))
    raw = gzip.decompress(data)
    spans = _warc_spans(raw)[:21]
    plain = tmp_path / "cut.warc"
    for s, e in spans[1:]:
        for at in (s + 20, (s + e) // 2, e):  # in the header, in the body, at the record's end
            plain.write_bytes(raw[:at])
            read, bad, _ = _read(plain)
            complete = sum(1 for _, end in spans if end <= at)
            assert len(bad) == (at < e), (at, bad)
            assert read.docs_in == complete + (at < e), (at, read.dropped)
    members, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(wbits=31)
        d.decompress(data[pos:])
        members.append(pos)
        pos = len(data) - len(d.unused_data)
    for j in range(1, 21):  # gzip: cut inside each member (one record each)
        cut.write_bytes(data[: (members[j] + members[j + 1]) // 2])
        read, bad, _ = _read(cut)
        assert len(bad) == 1 and read.docs_in == j + 1, (j, bad, read.dropped)


def _strict(b: Bad) -> None:
    raise InputError(f"{b.location}: {b.reason}")


def test_truncated_zstd_jsonl_is_reported(data_dir: Path, tmp_path: Path) -> None:
    import zstandard

    lines = _real_lines(data_dir, 100)
    comp = zstandard.ZstdCompressor().compressobj()
    out, ends = b"", []
    for line in lines:  # a flush per line: a cut after a line ends on a block boundary
        out += comp.compress(line) + comp.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        ends.append(len(out))
    out += comp.flush()
    path = tmp_path / "x.jsonl.zst"
    path.write_bytes(out)
    assert _read(path)[2] == 100 and not _read(path)[1]
    for at in (ends[56], ends[56] + 30):  # after line 57, and inside line 58
        path.write_bytes(out[:at])
        read, bad, docs = _read(path)
        assert docs == 57
        assert [(b.reason, b.location) for b in bad] == [("truncated_or_corrupt_stream", "after line 57")]


def test_jsonl_records_quarantined_after_parsing_name_their_line(data_dir: Path, tmp_path: Path) -> None:
    good = _real_lines(data_dir, 5)
    surrogate = b'{"id": "s", "text": "lone \\ud800 surrogate"}\n'
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join([good[0], b"\n", good[1], surrogate, good[2]]))
    _, bad, docs = _read(path)
    assert docs == 3 and [(b.reason, b.location) for b in bad] == [("undecodable_bytes", "line 4")]


def test_rows_of_a_corrupt_parquet_row_group_are_counted(data_dir: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in _real_lines(data_dir, 90)]
    path = tmp_path / "x.parquet"
    table = pa.table({"id": [str(i) for i in range(len(rows))], "text": [r["text"] for r in rows]})
    pq.write_table(table, path, row_group_size=30, compression="zstd", use_dictionary=False)
    meta = pq.read_metadata(path).row_group(1).column(1)
    data = bytearray(path.read_bytes())
    start = meta.data_page_offset + meta.total_compressed_size // 2
    data[start : start + 64] = random.Random(1).randbytes(64)  # in the middle of row group 1's text
    path.write_bytes(bytes(data))
    read, bad, docs = _read(path)
    assert docs == 60
    assert [(b.reason, b.records) for b in bad] == [("unreadable_row_group", 30)]
    assert read.docs_in == 90 and read.dropped["quarantined_unreadable_row_group"] == 30


# -- compressed inputs cut short: every record before the cut is read, the cut is named ----------


@pytest.fixture(scope="module")
def crawl_jsonl(data_dir: Path) -> bytes:
    """697 real JSON lines (3.3 MB), decompressed from the crawl extract."""
    return gzip.decompress((data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes())


def _cuts(size: int) -> list[int]:
    """Where to cut a compressed file: near its start (a gzip one: a few lines in), in its middle,
    in its last block, and before only its last bytes (a gzip file without its 8-byte trailer)."""
    return sorted({2500, 8000, size // 20, size // 3, size // 2, size * 9 // 10, size - 8})


@pytest.mark.parametrize("kind", ["gz", "bz2", "zst"])
def test_compressed_jsonl_cut_short_keeps_every_complete_line(
    crawl_jsonl: bytes, tmp_path: Path, kind: str
) -> None:
    """A gzip/bzip2/zstd JSONL cut anywhere: every line that ends before the cut is a document (both
    readers), the cut is one quarantined record after the last of them that says the file is
    truncated, and the read step's counts add up. (gzip and bzip2 lost up to 8 KB of lines before
    the cut: a file cut at 2,500 bytes read 0 of its 8 complete lines.)"""
    data = _COMPRESS[kind](crawl_jsonl)
    path = tmp_path / f"cut.jsonl.{kind}"
    for at in _cuts(len(data)):
        path.write_bytes(data[:at])
        complete = _complete_lines(data[:at], kind)
        assert complete > 0 or (kind != "gz" and at < 20_000), at  # else the cut proves nothing
        read, bad, docs = _read(path)
        assert docs == complete, (kind, at)
        where = f"after line {complete}" if complete else "file"  # or cut before its first block
        assert [(b.reason, b.location) for b in bad] == [("truncated_or_corrupt_stream", where)], (kind, at)
        assert "truncated" in bad[0].detail, bad[0]
        assert read.docs_in == complete + 1 and read.docs_out == complete, (kind, at, read.dropped)
        # the line-by-line reader reads the same lines and names the same place
        recs = list(read_jsonl(as_input(path)))
        assert sum(isinstance(r, Doc) for r in recs) == complete, (kind, at)
        assert [r.location for r in recs if isinstance(r, Bad)] == [f"after line {complete}"] or not complete


def test_cut_gzip_jsonl_curates_every_complete_line_and_quality_check_says_so(
    crawl_jsonl: bytes, tmp_path: Path
) -> None:
    """The audit's case end to end: a curate run counts every complete line in its funnel and
    quarantines the cut at its line; ``quality check`` reads the same lines and says what it did not
    read (it said "kept 0 of 0 documents")."""
    lines = crawl_jsonl.splitlines(keepends=True)[:200]
    data = gzip.compress(b"".join(lines))
    cut = tmp_path / "in" / "cut.jsonl.gz"
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) * 2 // 3])
    complete = _complete_lines(cut.read_bytes(), "gz")
    assert 100 < complete < 200
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SMALL)
    run_cli("curate", str(cut), "--out", str(tmp_path / "o"), "--config", str(cfg))
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    read = stats["stages"][0]
    assert read["docs_in"] == complete + 1 and read["docs_out"] == complete, read
    assert read["dropped"] == {"quarantined_truncated_or_corrupt_stream": 1}
    q = [json.loads(line) for line in (tmp_path / "o" / "quarantine.jsonl").read_text().splitlines()]
    assert [(r["location"], r["reason"]) for r in q] == [
        (f"after line {complete}", "truncated_or_corrupt_stream")
    ]
    assert "truncated" in q[0]["detail"]
    p = run_cli("quality", "check", str(cut))
    texts = sum(1 for line in lines[:complete] if json.loads(line)["text"].strip())  # it skips blank ones
    assert f"of {texts:,} documents" in p.stdout, p.stdout
    assert "not read: 1 bad record(s)" in p.stdout and "truncated_or_corrupt_stream" in p.stdout, p.stdout
    assert f"after line {complete}: truncated_or_corrupt_stream" in p.stderr and "truncated" in p.stderr
    # a file cut before its first line: nothing to keep, and it says so
    cut.write_bytes(data[:100])
    p = run_cli("quality", "check", str(cut))
    assert "kept 0 of 0 documents" in p.stdout and "not read: 1 bad record(s)" in p.stdout, p.stdout


def test_compressed_archives_cut_short_keep_every_complete_record(data_dir: Path, tmp_path: Path) -> None:
    """WARC (bzip2, through Python; zstd, through FastWARC) and ARC (gzip, zstd) cut in the middle:
    every record that ends before the cut is counted, the cut is one quarantined record, never a
    traceback. (A bzip2 WARC lost the records of FastWARC's last 64 KB read; a zstd WARC cut inside a
    page raised OSError; an ARC gzip lost records, and a whole zstd ARC read as binary.)"""
    raw = gzip.decompress((data_dir / "web" / "cc-main-2020-34-excerpt.warc.gz").read_bytes())
    ends = [e for _, e in _warc_spans(raw)]
    arc = (data_dir / "web" / "cc-2008-sample.arc").read_bytes()
    arc_ends, pos = [], 0
    while pos < len(arc):  # each record: a header line (after blank lines), then its length in bytes
        nl = arc.index(b"\n", pos)
        line, pos = arc[pos:nl], nl + 1
        if line.strip():
            pos += int(line.split()[-1])
            arc_ends.append(pos)
    assert len(arc_ends) == 146  # filedesc + 145, as test_readers' oracle counts them
    for fmt, plain, record_ends, kind in (
        ("warc", raw, ends, "bz2"),
        ("warc", raw, ends, "zst"),
        ("arc", arc, arc_ends, "gz"),
        ("arc", arc, arc_ends, "zst"),
    ):
        data = _COMPRESS[kind](plain)
        path = tmp_path / f"cut.{fmt}.{kind}"
        path.write_bytes(data)
        read, bad, _ = _read(path)  # whole: every record, nothing quarantined
        assert not bad and read.docs_in == len(record_ends), (fmt, kind, bad)
        for at in (len(data) // 3, len(data) // 2, len(data) * 9 // 10):
            path.write_bytes(data[:at])
            got = len(_recoverable(data[:at], kind))
            complete = sum(1 for e in record_ends if e <= got)
            assert complete > 0, (fmt, kind, at)
            read, bad, _ = _read(path)
            assert len(bad) == 1 and bad[0].reason.startswith("truncated"), (fmt, kind, at, bad)
            assert read.docs_in == complete + 1, (fmt, kind, at, read.dropped)
            assert bad[0].location.startswith(f"record {complete + 1}"), (fmt, kind, bad[0])


@pytest.mark.parametrize("kind", ["gz", "bz2", "zst"])
def test_compressed_text_cut_or_corrupt_is_quarantined(tmp_path: Path, kind: str) -> None:
    """A text file is one document: cut short it is quarantined as truncated (not read as the part
    before the cut); a corrupt gzip one is quarantined, not a zlib.error traceback."""
    text = (Path(__file__).parents[1] / "README.md").read_bytes()
    data = _COMPRESS[kind](text)
    path = tmp_path / f"doc.txt.{kind}"
    path.write_bytes(data)
    assert _read(path)[2] == 1
    path.write_bytes(data[: len(data) - 5])
    read, bad, docs = _read(path)
    assert docs == 0 and [b.reason for b in bad] == ["truncated_or_corrupt_stream"]
    assert "truncated" in bad[0].detail and read.docs_in == 1
    if kind == "gz":
        broken = bytearray(data)
        broken[len(data) // 2 : len(data) // 2 + 50] = bytes(
            b ^ 0x55 for b in broken[len(data) // 2 : len(data) // 2 + 50]
        )
        path.write_bytes(bytes(broken))
        read, bad, docs = _read(path)
        assert docs == 0 and [b.reason for b in bad] == ["truncated_or_corrupt_stream"], bad
