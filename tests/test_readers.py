"""Readers on every real crawl file: record counts checked against an independent parser written here.

The oracle below does not use FastWARC or llmpipe: it decompresses with the standard library and walks
the archive by its length fields (WARC ``Content-Length``, the ARC header's last field), counting
records by type. The reader must account for every record: a document, a counted skip, or quarantine.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re
import shutil
import zlib
from collections import Counter
from pathlib import Path

import pytest
import zstandard
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.steps import read_documents
from llmpipe.io.config import ReadConfig
from llmpipe.io.discover import discover
from llmpipe.io.read import detect_format
from llmpipe.io.records import Bad

WEB_FILES = [
    "cc-2008-sample.arc",
    "cc-2009-sample.arc",
    "cc-en-head-0091.jsonl",
    "cc-en-head-0174.jsonl",
    "cc-main-2019-30-extracted.jsonl.gz",
    "cc-main-2020-34-excerpt.warc.gz",
    "cc-main-2023-06-sample.jsonl.gz",
    "cc-main-2024-22-page.warc.gz",
    "cc-main-2024-22-page.warc.wat.gz",
    "cc-main-2024-22-page.warc.wet.gz",
    "truncated-record.warc.gz",
    "wget-crawl-0000.warc.gz",
    "wget-crawl-0001.warc.gz",
]


def _raw(path: Path) -> bytes:
    """The decompressed bytes; of a cut gzip stream, what can be decompressed (members one by one)."""
    data = path.read_bytes()
    if data[:2] != b"\x1f\x8b":
        return data
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        out.append(d.decompress(data))
        if not d.eof:
            break
        data = d.unused_data
    return b"".join(out)


def oracle_warc(path: Path) -> tuple[Counter[str], int]:
    """(records by WARC-Type, records cut short) by walking headers and Content-Length."""
    data, pos = _raw(path), 0
    types: Counter[str] = Counter()
    short = 0
    while True:
        start = data.find(b"WARC/", pos)
        if start < 0:
            return types, short
        end = data.index(b"\r\n\r\n", start)
        head = data[start:end].decode("latin-1")
        length = int(re.search(r"(?im)^content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
        types[re.search(r"(?im)^warc-type:\s*(\S+)", head).group(1)] += 1  # type: ignore[union-attr]
        if end + 4 + length > len(data):
            short += 1
        pos = end + 4 + length


def oracle_arc(path: Path) -> int:
    data, pos, n = _raw(path), 0, 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        line = data[pos:nl]
        pos = nl + 1
        if not line.strip():
            continue
        n += 1
        pos += int(line.split()[-1])
    return n


def oracle_jsonl(path: Path) -> int:
    return sum(1 for line in _raw(path).splitlines() if line.strip() and "text" in json.loads(line))


def read_all(path: Path, cfg: ReadConfig | None = None) -> tuple[StageCounts, StageCounts, list[Bad], list]:
    read, extract = StageCounts("read"), StageCounts("extract")
    bad: list[Bad] = []

    batches = list(read_documents(path, path.name, cfg or ReadConfig(), bad.append, read, extract))
    rows = [r for b in batches for r in b.to_pylist()]
    read.check()
    extract.check()
    assert read.docs_out == extract.docs_in
    assert extract.docs_out == len(rows)
    return read, extract, bad, rows


@pytest.mark.parametrize("name", WEB_FILES)
def test_every_record_of_every_web_file_is_accounted_for(data_dir: Path, name: str) -> None:
    path = data_dir / "web" / name
    read, extract, bad, rows = read_all(path)
    fmt = detect_format(path)
    d = read.dropped
    if fmt == "warc":
        types, short = oracle_warc(path)
        print(name, dict(types), "short:", short)
        assert read.docs_in == sum(types.values())
        assert d.get("skipped_warcinfo_record", 0) == types["warcinfo"]
        assert d.get("skipped_request_record", 0) == types["request"]
        meta = d.get("skipped_metadata_record", 0) + d.get("skipped_wat_metadata_record", 0)
        assert meta == types["metadata"]
        assert d.get("quarantined_truncated_record", 0) == short
        pages = types["response"] + types["resource"] + types["conversion"] - short
        assert read.docs_out + d.get("skipped_non_html", 0) + d.get("skipped_http_status_not_2xx", 0) == pages
    elif fmt == "arc":
        n = oracle_arc(path)
        print(name, "records:", n)
        assert read.docs_in == n
        assert d["skipped_arc_filedesc_record"] == 1
    else:
        assert fmt == "jsonl"
        assert read.docs_in == read.docs_out == oracle_jsonl(path)
        assert extract.docs_out == read.docs_out  # text inputs pass extract unchanged
    assert not [b for b in bad if b.reason != "truncated_record"]


def test_known_counts(data_dir: Path) -> None:
    """The counts the data's SOURCES.md states, as a second check on the oracle itself."""
    web = data_dir / "web"
    assert oracle_warc(web / "cc-main-2020-34-excerpt.warc.gz")[0] == Counter(
        warcinfo=1, request=17, response=16, metadata=16
    )
    assert sum(oracle_warc(web / "wget-crawl-0000.warc.gz")[0].values()) == 48
    assert sum(oracle_warc(web / "wget-crawl-0001.warc.gz")[0].values()) == 34
    assert oracle_arc(web / "cc-2009-sample.arc") == 9  # filedesc + 8
    assert oracle_arc(web / "cc-2008-sample.arc") == 146  # filedesc + 145


def test_wet_wat_and_warc_of_one_page(data_dir: Path) -> None:
    web = data_dir / "web"
    _, _, _, wet = read_all(web / "cc-main-2024-22-page.warc.wet.gz")
    read, _, _, wat = read_all(web / "cc-main-2024-22-page.warc.wat.gz")
    _, _, _, warc = read_all(web / "cc-main-2024-22-page.warc.gz")
    assert wat == [] and read.dropped["skipped_wat_metadata_record"] == 1
    assert len(wet) == len(warc) == 1
    url = "https://an.wikipedia.org/wiki/Escopete"
    # WET conversion records are already text: passed on byte for byte
    raw = _raw(web / "cc-main-2024-22-page.warc.wet.gz")
    assert wet[0]["text"].encode() in raw
    for row in (wet[0], warc[0]):
        meta = json.loads(row["meta"])
        assert meta["url"] == url
        assert meta["date"].startswith("2024-05-")
    assert json.loads(warc[0]["meta"])["content_type"] == "text/html"
    # both the WET text (Common Crawl's own extraction) and ours hold the article's first sentence
    first = "Escopete ye un municipio"
    assert first in wet[0]["text"] and first in warc[0]["text"]
    assert "<" not in warc[0]["text"]


def test_arc_metadata_and_text(data_dir: Path) -> None:
    _, _, _, rows = read_all(data_dir / "web" / "cc-2009-sample.arc")
    meta = json.loads(rows[0]["meta"])
    assert meta == {
        "url": "http://www.coursehero.com/prefix/32/documents/14501/",
        "date": "2009-11-21T00:45:01Z",
        "content_type": "text/html",
    }
    # the page's main text: its document descriptions (each under its file's name), navigation dropped
    text = rows[0]["text"]
    assert text.startswith("00000056.pdf\nDescription: ...\nDescription: Viral Vectors and Gene Therapy I")
    assert "Home" not in text.split("\n")


def test_warc_ids_are_record_ids(data_dir: Path) -> None:
    _, _, _, rows = read_all(data_dir / "web" / "wget-crawl-0000.warc.gz")
    assert all(re.fullmatch(r"wget-crawl-0000\.warc\.gz/urn:uuid:[0-9A-F-]{36}", r["id"]) for r in rows)
    assert len({r["id"] for r in rows}) == len(rows) == 22  # every one of the 22 pages has main text


@pytest.mark.parametrize("codec", ["plain", "zstd", "bz2"])
def test_warc_in_other_codecs_reads_the_same(data_dir: Path, tmp_path: Path, codec: str) -> None:
    src = data_dir / "web" / "cc-main-2020-34-excerpt.warc.gz"
    raw = _raw(src)
    out = tmp_path / f"x.warc.{codec}"
    if codec == "zstd":
        out.write_bytes(zstandard.ZstdCompressor().compress(raw))
    elif codec == "bz2":
        out.write_bytes(bz2.compress(raw))
    else:
        out.write_bytes(raw)
    assert detect_format(out) == "warc"
    want = [(r["id"].split("/", 1)[1], r["text"]) for r in read_all(src)[3]]
    got = [(r["id"].split("/", 1)[1], r["text"]) for r in read_all(out)[3]]
    assert got == want and len(got) == 12  # 16 pages, 4 of them link lists or listings without main text


@pytest.mark.parametrize("codec", ["zst", "bz2", "gz", "plain"])
def test_jsonl_codecs(data_dir: Path, tmp_path: Path, codec: str) -> None:
    src = data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz"
    raw = gzip.decompress(src.read_bytes())
    # named .jsonl only: the codec is detected from the bytes, not the suffix
    out = tmp_path / "data.jsonl"
    data = {
        "zst": zstandard.ZstdCompressor().compress(raw),
        "bz2": bz2.compress(raw),
        "gz": gzip.compress(raw),
        "plain": raw,
    }[codec]
    out.write_bytes(data)
    read, _, bad, rows = read_all(out)
    assert not bad and len(rows) == 697
    first = json.loads(raw.splitlines()[0])
    assert rows[0]["text"] == first["text"] and rows[0]["id"] == f"data.jsonl/{first['id']}"


def test_globs_and_directories(data_dir: Path, tmp_path: Path) -> None:
    web = data_dir / "web"
    (tmp_path / "a" / "b").mkdir(parents=True)
    shutil.copy(web / "cc-2009-sample.arc", tmp_path / "a" / "b" / "old.arc")
    shutil.copy(web / "wget-crawl-0000.warc.gz", tmp_path / "a" / "crawl.warc.gz")
    (tmp_path / "a" / ".hidden").write_text("x")
    files = discover([str(tmp_path / "a")])
    assert [f.name for f in files] == ["old.arc", "crawl.warc.gz"]
    assert [f.name for f in discover([str(tmp_path / "a" / "**" / "*.arc")])] == ["old.arc"]
    assert len(discover([str(web / "*.warc.gz")])) == 5


def _peak_mb(path: Path) -> float:
    """Peak RSS (VmHWM: reset by exec, unlike ru_maxrss) of a fresh process that reads ``path``."""
    import subprocess
    import sys

    code = (
        "import re; from pathlib import Path; from llmpipe.curate.steps import read_documents\n"
        "from llmpipe.io.config import ReadConfig\n"
        f"n = sum(b.num_rows for b in read_documents(Path({str(path)!r}), 'x', ReadConfig(), print))\n"
        "print(n, int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)) / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    n, peak = out.split()[-2:]
    return float(peak)


def test_memory_does_not_grow_with_input_size(data_dir: Path, tmp_path: Path) -> None:
    """Reading 5x more WARC (22 MB of raw records) or JSONL does not take more memory."""
    for name in ("cc-main-2020-34-excerpt.warc.gz", "cc-main-2019-30-extracted.jsonl.gz"):
        member = (data_dir / "web" / name).read_bytes()  # gzip members concatenate into one stream
        small, big = tmp_path / f"small-{name}", tmp_path / f"big-{name}"
        small.write_bytes(member * 8)
        big.write_bytes(member * 40)
        p_small, p_big = _peak_mb(small), _peak_mb(big)
        print(name, f"peak RSS {p_small:.0f} MB for 8 copies, {p_big:.0f} MB for 40")
        assert p_big - p_small < 25, (name, p_small, p_big)
