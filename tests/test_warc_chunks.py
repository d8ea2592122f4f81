"""Crawl archives in chunks: a multi-member ``.warc.gz`` is cut between gzip members, a plain WARC or
ARC between records; every chunk reads exactly the records a whole-file read gives it, broken files
included, and curate gives the same bytes for any chunk size and worker count, also after a kill."""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from pathlib import Path

import pytest
from conftest import run_cli
from fastwarc.warc import ArchiveIterator, WarcRecordType
from llmpipe.errors import InputError
from llmpipe.io.chunks import Span, split
from llmpipe.io.config import ReadConfig
from llmpipe.io.read import detect_format, records
from llmpipe.io.records import Bad

CONFIG = (
    "pack:\n  seq_len: 64\n  samples_per_shard: 100\n  val_fraction: 0.05\n"
    "tokenizer:\n  vocab_size: 300\n  sample_bytes: 1000000\n"
)


def _members(data: bytes) -> list[bytes]:
    """The gzip members of ``data``, each inflated on its own by Python's gzip module."""
    out, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(wbits=31)
        d.decompress(data[pos:])
        end = len(data) - len(d.unused_data)
        gzip.decompress(data[pos:end])  # a whole, valid member (CRC checked)
        out.append(data[pos:end])
        pos = end
    return out


def _record_starts(path: Path) -> list[int]:
    with open(path, "rb") as f:
        return [
            r.stream_pos for r in ArchiveIterator(f, record_types=WarcRecordType.any_type, parse_http=False)
        ]


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Path]:
    """Real archives and variants of them: plain, several records per member, records split over
    members, per-record gzip ARC, and broken ones (cut short, a corrupt member, a bad header, junk)."""
    d = tmp_path_factory.mktemp("archives")
    web = data_dir / "web"
    src = (web / "wget-crawl-0000.warc.gz").read_bytes()
    members = _members(src)
    recs = [gzip.decompress(m) for m in members]
    files = {
        "wget": web / "wget-crawl-0000.warc.gz",
        "cc": web / "cc-main-2020-34-excerpt.warc.gz",
        "arc": web / "cc-2008-sample.arc",
    }

    def put(name: str, data: bytes) -> None:
        (d / name).write_bytes(data)
        files[name] = d / name

    put("plain.warc", b"".join(recs))
    put("pairs.warc.gz", b"".join(gzip.compress(b"".join(recs[i : i + 2])) for i in range(0, len(recs), 2)))
    put(
        "halves.warc.gz",
        b"".join(
            gzip.compress(r[: len(r) // 2]) + gzip.compress(r[len(r) // 2 :])
            if i % 5 == 0
            else gzip.compress(r)
            for i, r in enumerate(recs)
        ),
    )
    put("one-stream.warc.gz", gzip.compress(b"".join(recs)))
    put("cut.warc.gz", src[: len(src) - len(members[-1]) // 2])
    put("corrupt.warc.gz", b"".join(members[:20]) + members[20][:100] + b"".join(members[21:]))
    put("junk.warc.gz", src + b"junk" * 20)
    cut_at = sum(len(r) for r in recs[:30])
    put(
        "badheader.warc",
        b"".join(recs)[:cut_at] + b"WARC/1.0\r\nNo-Length: x\r\n\r\n" + b"".join(recs)[cut_at:],
    )
    arc = (web / "cc-2009-sample.arc").read_bytes()
    arc_recs, pos = [], 0
    while pos < len(arc):  # ARC records by their header's length field
        nl = arc.index(b"\n", pos)
        end = nl + 1 + int(arc[pos:nl].split()[-1])
        end += len(arc[end:]) - len(arc[end:].lstrip(b"\n"))
        arc_recs.append(arc[pos:end])
        pos = end
    put("members.arc.gz", b"".join(gzip.compress(r) for r in arc_recs))
    lines = gzip.decompress((web / "cc-main-2019-30-extracted.jsonl.gz").read_bytes()).splitlines(
        keepends=True
    )
    lines = [
        x for i, line in enumerate(lines[:300]) for x in ([line, b"{not json\n"] if i % 40 == 0 else [line])
    ]
    put(
        "cat.jsonl.gz", b"".join(gzip.compress(b"".join(lines[i : i + 20])) for i in range(0, len(lines), 20))
    )
    put("cut.arc", (web / "cc-2008-sample.arc").read_bytes()[:-5000])
    return files


def test_cuts_are_the_gzip_members_and_the_records(archives: dict[str, Path]) -> None:
    """Tiny chunks cut at every member (gzip's own reading of the members; FastWARC's record offsets),
    at every record header of a plain WARC, and never inside a record or a single gzip stream."""
    for name in ("wget", "cc"):
        data = archives[name].read_bytes()
        members = _members(data)
        spans = split(archives[name], "warc", 1)
        starts = [s.start for s in spans if s is not None]
        assert len(spans) == len(members) > 40, name
        assert starts == _record_starts(archives[name])  # one record per member (Common Crawl)
        assert [s.first for s in spans if s is not None] == list(range(len(members)))
    spans = split(archives["plain.warc"], "warc", 1)
    assert [s.start for s in spans if s is not None] == _record_starts(archives["plain.warc"])
    assert len(split(archives["pairs.warc.gz"], "warc", 1)) == 24  # 48 records, two per member
    assert len(split(archives["halves.warc.gz"], "warc", 1)) == 48  # only members that start a record
    assert split(archives["one-stream.warc.gz"], "warc", 1) == [None]
    assert len(split(archives["members.arc.gz"], "arc", 1)) == 9
    assert len(split(archives["arc"], "arc", 1)) == 146


@pytest.mark.parametrize("chunk_bytes", [1, 7000, 30000, 150000])
def test_chunks_read_what_the_whole_file_reads(archives: dict[str, Path], chunk_bytes: int) -> None:
    """Documents, skips and quarantined records (with their locations and positions) of all chunks, in
    order, are those of one whole-file read: the broken files too, whose trouble stays in one chunk."""
    cfg = ReadConfig()
    split_somewhere = 0
    for name, path in archives.items():
        fmt = detect_format(path)
        whole = list(records(path, cfg))
        spans = split(path, fmt, chunk_bytes)
        split_somewhere += len(spans) > 1
        assert [r for s in spans for r in records(path, cfg, s)] == whole, (name, chunk_bytes)
    assert split_somewhere >= (10 if chunk_bytes < 10000 else 3)


def _tree(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir()) if p.is_file()}


def _curate(
    src: Path, out: Path, cfg: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    args = ("curate", str(src), "--out", str(out), "--config", str(cfg), *extra)
    p = run_cli(*args, check=env is None, env=env)
    return p.returncode, p.stdout


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory, archives: dict[str, Path]) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("crawl")
    for name in ("wget", "cc", "plain.warc", "members.arc.gz", "corrupt.warc.gz", "cat.jsonl.gz"):
        (d / archives[name].name).write_bytes(archives[name].read_bytes())
    cfg = d.parent / "cfg.yaml"
    cfg.write_text(CONFIG)
    return d, cfg


def _parts(stdout: str) -> int:
    return int(stdout.split(" in ")[1].split(" part")[0])


def test_curate_archives_same_bytes_for_workers_and_chunks(crawl: tuple[Path, Path], tmp_path: Path) -> None:
    d, cfg = crawl
    _, out = _curate(d, tmp_path / "ref", cfg, "--workers", "1", "--chunk-mb", "1000")
    assert "6 input(s)" in out and _parts(out) <= 6  # no input split (small ones share a part)
    ref = _tree(tmp_path / "ref")
    assert sum(n.startswith("train-") for n in ref) > 3
    bad = (tmp_path / "ref" / "quarantine.jsonl").read_text()
    assert '"source": "corrupt.warc.gz", "location": "record 21"' in bad  # where in the whole file
    for workers, chunk_mb in (("2", "1000"), ("2", "0.05"), ("1", "0.1"), ("2", "0.3")):
        out_dir = tmp_path / f"w{workers}-c{chunk_mb}"
        _, out = _curate(d, out_dir, cfg, "--workers", workers, "--chunk-mb", chunk_mb)
        assert _parts(out) > 6 or chunk_mb == "1000", out
        assert _tree(out_dir) == ref, (workers, chunk_mb)


def test_killed_chunked_archive_run_resumes_to_the_same_bytes(
    crawl: tuple[Path, Path], tmp_path: Path
) -> None:
    d, cfg = crawl
    _curate(d, tmp_path / "ref", cfg, "--workers", "1", "--chunk-mb", "1000")
    out = tmp_path / "out"
    for point in ("segment 0#4 committed", "segment 1#12"):
        code, _ = _curate(
            d, out, cfg, "--workers", "2", "--chunk-mb", "0.05", env={"LLMPIPE_FAULT_AFTER": point}
        )
        assert code == -9, point
    _curate(d, out, cfg, "--workers", "2", "--chunk-mb", "0.05")
    assert _tree(out) == _tree(tmp_path / "ref")


def test_chunks_of_an_archive_on_another_file_system(archives: dict[str, Path]) -> None:
    """The same through fsspec (its in-memory file system): cuts found and records read by ranges."""
    import fsspec
    from llmpipe.io.fs import RemotePath

    fs = fsspec.filesystem("memory")
    cfg = ReadConfig()
    for name in ("wget", "plain.warc", "members.arc.gz", "arc", "corrupt.warc.gz"):
        fs.pipe(f"/warc-chunks/{name}", archives[name].read_bytes())
        remote = RemotePath(f"memory://warc-chunks/{name}")
        spans = split(remote, detect_format(remote), 30000)
        assert spans == split(archives[name], detect_format(archives[name]), 30000)
        assert len(spans) > 1, name
        assert [r for s in spans for r in records(remote, cfg, s)] == list(records(archives[name], cfg)), name


def test_a_chunk_whose_index_disagrees_with_the_records_fails_in_one_line(archives: dict[str, Path]) -> None:
    """A chunk ends where its index says the next record starts; a record count that does not lead
    there (a file changed after indexing, or records FastWARC counts otherwise) is an error, never
    documents read twice or lost."""
    path = archives["wget"]
    spans = [s for s in split(path, "warc", 1) if s is not None]
    cfg = ReadConfig()
    ok = Span(spans[0].start, spans[2].start, 0, 0, 2)
    assert len(list(records(path, cfg, ok))) == 2
    for last in (1, 3):
        with pytest.raises(InputError, match="does not start the chunk"):
            list(records(path, cfg, Span(spans[0].start, spans[2].start, 0, 0, last)))


def test_the_index_pass_stops_at_a_member_longer_than_a_chunk(
    archives: dict[str, Path], tmp_path: Path
) -> None:
    """A gzip member longer than a chunk and 16 MiB (a file compressed as one stream, or one stream
    after a warcinfo member) ends the cutting there, without inflating the rest: the rest is one chunk."""
    recs = [gzip.decompress(m) for m in _members(archives["wget"].read_bytes())]
    body = os.urandom(17 << 20)  # incompressible: a member of 17 MiB
    big = (
        b"WARC/1.0\r\nWARC-Type: resource\r\nWARC-Record-ID: <urn:uuid:big>\r\n"
        b"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
        % len(body)
        + body
        + b"\r\n\r\n"
    )
    head = b"".join(gzip.compress(r) for r in recs[:10])
    path = tmp_path / "big-member.warc.gz"
    path.write_bytes(
        head
        + gzip.compress(big + b"".join(recs[10:20]), compresslevel=1)
        + b"".join(gzip.compress(r) for r in recs[20:])
    )
    spans = split(path, "warc", 1)
    assert [s.start for s in spans if s is not None] == _record_starts(path)[:10]  # members after it: not cut
    assert spans[-1] is not None and spans[-1].start < len(head) and spans[-1].end == path.stat().st_size
    cfg = ReadConfig()
    assert [r for s in spans for r in records(path, cfg, s)] == list(records(path, cfg))


def test_gzip_jsonl_of_many_members_is_cut_between_members_at_lines(
    tmp_path: Path, archives: dict[str, Path]
) -> None:
    """A JSONL of gzip members (files joined with ``cat``) is cut at members that start a line, counted
    by gzip's own reading; members that start inside a line, a broken stream and one stream stay whole."""
    path = archives["cat.jsonl.gz"]
    members = _members(path.read_bytes())
    cfg = ReadConfig()
    whole = list(records(path, cfg))
    assert any(r.reason == "invalid_json" for r in whole if isinstance(r, Bad))
    for chunk_bytes in (1, 20000, 100000):
        spans = split(path, "jsonl", chunk_bytes)
        assert len(spans) == (len(members) if chunk_bytes == 1 else len(spans)) > 1
        assert [r for s in spans for r in records(path, cfg, s)] == whole, chunk_bytes
    raw = b"".join(gzip.decompress(m) for m in members)
    at = [
        raw.index(b"\n", n) + 1 for n in range(5000, len(raw) - 5000, 7919)
    ]  # some cuts right after a newline
    cuts = sorted({*at, *range(3000, len(raw), 9001)})  # most inside lines
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    bgz = tmp_path / "blocks.jsonl.gz"
    bgz.write_bytes(b"".join(gzip.compress(p) for p in pieces))
    spans = split(bgz, "jsonl", 1)
    starts = {s.start for s in spans if s is not None}
    offsets = [0]
    for p in pieces:
        offsets.append(offsets[-1] + len(gzip.compress(p)))
    line_starts = {
        o for o, done in zip(offsets, [0, *cuts], strict=False) if done == 0 or raw[done - 1 : done] == b"\n"
    }
    assert starts == line_starts and len(starts) > 5
    assert [r for s in spans for r in records(bgz, cfg, s)] == list(records(bgz, cfg))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(path.read_bytes()[:-300])
    assert split(cut, "jsonl", 1) == [None]
    one = tmp_path / "one.jsonl.gz"
    one.write_bytes(gzip.compress(raw))
    assert split(one, "jsonl", 1) == [None]
