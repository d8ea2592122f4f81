"""JSONL's compiled fast path (``read_jsonl_blocks`` + ``_core.parse_jsonl_block``) against the
line-by-line Python reader as the oracle: the same batches (ids, texts, positions, metadata, batch
boundaries) and the same bad records, on real crawl JSONL and on a file of every odd case, read in
blocks of a few bytes to megabytes, in chunks, compressed, truncated and corrupt."""

from __future__ import annotations

import bz2
import gzip
import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import zstandard
from llmpipe.io.chunks import Span, split
from llmpipe.io.config import ReadConfig
from llmpipe.io.jsonl import BLOCK_BYTES, read_jsonl_blocks
from llmpipe.io.read import detect_format, read_input
from llmpipe.io.records import DocRun

MAX_DOC = 300  # small, so that a line over 2 * MAX_DOC + 65536 bytes is cheap to make
LIMIT = 2 * MAX_DOC + 65536


def same_as_oracle(path: Path, cfg: ReadConfig, block: int, span: Span | None = None) -> list[Any]:
    """Assert the fast reader's output equals the line-by-line reader's; return it."""
    want = list(read_input(path, "src", cfg, span, jsonl_block=0))
    got = list(read_input(path, "src", cfg, span, jsonl_block=block))
    assert len(got) == len(want), (path.name, block, span)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, pa.RecordBatch):
            assert isinstance(g, pa.RecordBatch) and g.schema == w.schema
            assert g.equals(w), (path.name, block, span, g.to_pylist()[:3], w.to_pylist()[:3])
        else:
            assert g == w, (path.name, block, span)
    return want


def fast_docs(path: Path, cfg: ReadConfig) -> int:
    """Documents that came through the compiled path (not left to Python)."""
    return sum(
        len(r)
        for r in read_jsonl_blocks(path, cfg.text_field, cfg.id_field, cfg.max_doc_bytes)
        if isinstance(r, DocRun)
    )


def test_real_crawl_jsonl_reads_the_same(data_dir: Path, tmp_path: Path) -> None:
    paths = sorted((data_dir / "web").glob("*.jsonl*"))
    assert len(paths) >= 4
    for path in paths:
        for cfg in (ReadConfig(), ReadConfig(batch_size=7)):
            out = same_as_oracle(path, cfg, BLOCK_BYTES)
            docs = sum(b.num_rows for b in out if isinstance(b, pa.RecordBatch))
            assert docs > 0 and fast_docs(path, cfg) == docs  # every crawl document took the fast path
        same_as_oracle(path, ReadConfig(batch_size=3), 4096)
    # the extracted crawl (697 documents) as plain JSONL, read in chunks of the sizes workers use
    plain = tmp_path / "crawl.jsonl"
    plain.write_bytes(gzip.decompress((data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz").read_bytes()))
    cfg = ReadConfig(batch_size=50)
    whole = same_as_oracle(plain, cfg, 1 << 16)
    for chunk_bytes in (100_000, 1_000_000):
        spans = split(plain, "jsonl", chunk_bytes)
        assert len(spans) > 1
        parts = [r for s in spans for r in same_as_oracle(plain, cfg, 1 << 16, s)]
        assert sum(b.num_rows for b in parts if isinstance(b, pa.RecordBatch)) == sum(
            b.num_rows for b in whole if isinstance(b, pa.RecordBatch)
        )


def odd_lines() -> list[bytes]:
    """One line per odd case (each ends with a newline)."""
    docs: list[dict[str, Any]] = [
        {"text": "plain", "id": 1},
        {"text": "str id", "id": "a"},
        {"text": "float id", "id": 1.5},
        {"text": "float id 2", "id": 1e16},
        {"text": "bool id", "id": True},
        {"text": "list id", "id": [1, 2]},
        {"text": "object id", "id": {"b": 1}},
        {"text": "null id", "id": None},
        {"text": "no id"},
        {"text": "negative id", "id": -3},
        {"text": "huge id", "id": 123456789012345678901234567890},
        {"text": "repeated id", "id": "a"},
        {"text": "repeated int id", "id": 1},
        {"text": "id equal to a position", "id": 8},
        {
            "text": "floats",
            "f": [
                1e-05,
                1e16,
                1.5e16,
                1.5,
                -0.0,
                0.1,
                1e308,
                0.0001,
                123.0,
                5e-324,
                0.1 + 0.2,
                1e22,
                -2.5e-7,
            ],
        },
        {"text": "nested", "z": {"b": 1, "a": {"z": [], "y": {}, "x": [{"d": 1, "c": None}]}}, "a": False},
        {"text": "unicode keys", "ü": "x", "é": 1, "日本": [], "Z": 0, "\U0001f600": "emoji", "\u2028": 1},
        {
            "text": 'escapes " \\ / \n \r \t \b \f \x00 \x01 \x1f \x7f \u2028 \u2029 \U0001f600 日本',
            "m": 'escapes " \\ / \n \r \t \b \f \x00 \x01 \x1f \x7f \u2028 \U0001f600',
            '\n"key\\': "escaped key",
        },
        {"text": "", "id": "empty text"},
        {"text": "x" * MAX_DOC, "id": "at max_doc_bytes"},
        {"text": "x" * (MAX_DOC + 1), "id": "over max_doc_bytes"},
        {"text": "é" * 200, "id": "over max_doc_bytes in UTF-8 bytes"},
    ]
    lines = [json.dumps(d).encode() + b"\n" for d in docs]  # ASCII-only JSON: every escape
    lines += [json.dumps(d, ensure_ascii=False).encode() + b"\n" for d in docs[14:19]]  # raw UTF-8
    lines += [
        b'{"text": "lone surrogate \\ud800 in text"}\n',
        b'{"text": "lone surrogate in meta", "m": "\\udc00"}\n',
        b'{"text": "lone surrogate in id", "id": "\\ud83d"}\n',
        b'{"text": "pair \\ud83d\\ude00 and upper-case hex \\u00E9"}\n',
        b'{"text": "NaN", "m": NaN, "n": Infinity, "o": -Infinity}\n',
        b'{"text": "inf", "m": 1e400}\n',
        b'{"text": "dup", "text": "dup 2", "id": 5, "id": null, "m": 1, "m": 2}\n',
        b'{"text": "dup id", "id": 5, "id": "five"}\n',
        b'{"text": "nested dup", "m": {"b": 1, "a": 2, "b": 3}}\n',
        b'{"te\\u0078t": "escaped key", "\\u00e9": 1}\n',
        b'{"text": "numbers", "a": -0, "b": 1E5, "c": 1e-7, "d": 0.30000000000000004, "e": 1.0e+2, "f": 12}\n',
        b'{"text": "big int", "f": 123456789012345678901234567890123}\n',
        b'{"text": "too many digits", "f": ' + b"9" * 5000 + b"}\n",
        b'{"text": "deep", "m": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
        b'  {"text" : "spaced" ,"id":2 }  \t\n',
        b'{"text": "crlf"}\r\n',
        b"\n",
        b"   \n",
        b"\t\x0b\x0c\r\n",
        b'{"text": "x",}\n',
        b'{text: "x"}\n',
        b'{"text": "x"} {"text": "y"}\n',
        b'{"text": "raw\ttab"}\n',
        b'{"text": "bad escape \\x41"}\n',
        b'{"text": "\xff invalid utf-8"}\n',
        b'{"text": "overlong \xc0\xaf"}\n',
        b"\xef\xbb\xbf" + b'{"text": "bom"}\n',
        b'\x0c{"text": "form feed first"}\n',
        b"[1, 2]\n",
        b'"a string"\n',
        b"3\n",
        b"{}\n",
        b'{"text": null}\n',
        b'{"text": 3}\n',
        b'{"text": ["a"]}\n',
        b'{"id": "no text"}\n',
        b'{"text": "' + b"x" * (LIMIT + 5) + b'"}\n',  # over-long line
        b'{"text": "' + b"y" * (LIMIT - 12) + b'"}\n',  # exactly the limit without its newline
        b'{"text": "' + b"y" * (LIMIT - 11) + b'"}\n',  # one over
    ]
    return lines


def write_variants(tmp_path: Path, body: bytes, name: str) -> list[Path]:
    out = []
    for suffix, data in (
        ("", body),
        (".gz", gzip.compress(body)),
        (".zst", zstandard.ZstdCompressor().compress(body)),
        (".bz2", bz2.compress(body)),
    ):
        p = tmp_path / f"{name}.jsonl{suffix}"
        p.write_bytes(data)
        out.append(p)
    return out


def test_odd_lines_read_the_same(tmp_path: Path) -> None:
    lines = odd_lines()
    body = b"".join(lines)
    cfg = ReadConfig(batch_size=3, max_doc_bytes=MAX_DOC)
    plain, *packed = write_variants(tmp_path, body, "odd")
    out = same_as_oracle(plain, cfg, BLOCK_BYTES)
    reasons = {r.reason for r in out if not isinstance(r, pa.RecordBatch)}
    assert reasons == {
        "undecodable_bytes",
        "invalid_json",
        "not_an_object",
        "missing_text_field",
        "text_not_a_string",
        "document_too_large",
    }
    meta_surrogate = next(r for r in out if getattr(r, "snippet", "").startswith("lone surrogate in meta"))
    assert meta_surrogate.reason == "undecodable_bytes"  # (it stopped the reader with a traceback)
    ids = [i for b in out if isinstance(b, pa.RecordBatch) for i in b.column("id").to_pylist()]
    assert "src/a" in ids and "src/a#11" in ids and "src/1#12" in ids and "src/True" in ids
    assert fast_docs(plain, cfg) > 20
    for block in (7, 64, 1000, 70_000, 200_000):
        same_as_oracle(plain, cfg, block)
    for path in packed:
        for block in (64, BLOCK_BYTES):
            same_as_oracle(path, cfg, block)
    # the last line without its newline, and a file of only an over-long line (with and without one)
    for i, tail in enumerate((lines[0].rstrip(b"\n"), lines[-3].rstrip(b"\n"), lines[-1].rstrip(b"\n"))):
        for extra in (b"", b"\n\n"):
            p = tmp_path / f"tail{i}{len(extra)}.jsonl"
            p.write_bytes(body[:5000] + tail + extra)
            for block in (7, 1000, BLOCK_BYTES):
                same_as_oracle(p, cfg, block)
    # other field names; the text field also the id field
    for fields in ({"text_field": "m"}, {"id_field": "text"}, {"text_field": "id", "id_field": "id"}):
        for block in (64, BLOCK_BYTES):
            same_as_oracle(plain, ReadConfig(batch_size=4, max_doc_bytes=MAX_DOC, **fields), block)


def test_a_byte_order_mark_and_a_null_text(data_dir: Path, tmp_path: Path) -> None:
    """A file that starts with a UTF-8 byte order mark (Windows tools write one) loses no record; a
    null text is said to be null, not a missing key."""
    body = (data_dir / "web" / "cc-en-head-0091.jsonl").read_bytes()
    n = body.count(b"\n")
    cfg = ReadConfig(batch_size=7)
    for i, variant in enumerate(write_variants(tmp_path, b"\xef\xbb\xbf" + body, "bom")):
        for block in (64, 1000, BLOCK_BYTES):
            out = same_as_oracle(variant, cfg, block)
            assert not [r for r in out if not isinstance(r, pa.RecordBatch)], (variant.name, block)
            assert sum(len(r) for r in out) == n
            if i == 0:  # the mark is not part of the first text
                first = next(r for r in out if isinstance(r, pa.RecordBatch))
                assert first.column("text")[0].as_py() == json.loads(body.split(b"\n")[0])["text"]
    p = tmp_path / "null.jsonl"
    p.write_bytes(body.split(b"\n")[0] + b'\n{"text": null, "id": 3}\n{"id": 4}\n')
    bad = [r for r in same_as_oracle(p, cfg, BLOCK_BYTES) if not isinstance(r, pa.RecordBatch)]
    assert [(b.reason, b.location, b.detail) for b in bad] == [
        ("text_not_a_string", "line 2", "'text' is null"),
        ("missing_text_field", "line 3", "no 'text' key"),
    ]


def test_odd_lines_read_the_same_in_chunks(tmp_path: Path) -> None:
    lines = odd_lines() * 2
    body = b"".join(lines)
    cfg = ReadConfig(batch_size=5, max_doc_bytes=MAX_DOC)
    plain = tmp_path / "odd.jsonl"
    plain.write_bytes(body)
    for chunk_bytes in (500, 5000, 70_000):
        spans = split(plain, "jsonl", chunk_bytes)
        assert len(spans) > 1
        for s in spans:
            for block in (7, BLOCK_BYTES):
                same_as_oracle(plain, cfg, block, s)
    # gzip members joined with cat: cut between members that start a line
    members = tmp_path / "odd-members.jsonl.gz"
    members.write_bytes(b"".join(gzip.compress(b"".join(lines[i : i + 9])) for i in range(0, len(lines), 9)))
    spans = split(members, "jsonl", 2000)
    assert len(spans) > 1
    for s in spans:
        same_as_oracle(members, cfg, 100, s)


def test_truncated_and_corrupt_streams_read_the_same(tmp_path: Path) -> None:
    """A stream cut short or damaged keeps exactly the lines the line reader recovers."""
    rng = random.Random(5)
    lines = [ln for ln in odd_lines() if len(ln) < 10_000] * 10
    lines += [json.dumps({"text": random_text(rng) * 20, "id": i}).encode() + b"\n" for i in range(2000)]
    rng.shuffle(lines)
    body = b"".join(lines)
    cfg = ReadConfig(batch_size=16, max_doc_bytes=MAX_DOC)
    packed = {
        "gz": gzip.compress(body),
        "zst": zstandard.ZstdCompressor().compress(body),
        "bz2": bz2.compress(body),
    }
    truncated = 0
    for kind, data in packed.items():
        for n, cut in enumerate(
            [len(data) // 3, len(data) // 2, len(data) - 9, *rng.sample(range(len(data) // 4, len(data)), 3)]
        ):
            p = tmp_path / f"cut{n}.jsonl.{kind}"
            p.write_bytes(data[:cut])
            for block in (64, BLOCK_BYTES):
                out = same_as_oracle(p, cfg, block)
                if detect_format(p) == "jsonl":  # (a short bzip2 head decompresses to nothing)
                    assert any(getattr(r, "reason", "") == "truncated_or_corrupt_stream" for r in out)
                    truncated += 1
    assert truncated >= 24
    # damaged deflate data in the middle of a gzip stream (zlib.error or a CRC error)
    gz = bytearray(packed["gz"])
    for n, at in enumerate((len(gz) // 4, len(gz) // 2)):
        bad = gz.copy()
        bad[at : at + 8] = bytes(8)
        p = tmp_path / f"corrupt{n}.jsonl.gz"
        p.write_bytes(bytes(bad))
        for block in (64, BLOCK_BYTES):
            out = same_as_oracle(p, cfg, block)
            assert any(getattr(r, "reason", "") == "truncated_or_corrupt_stream" for r in out)
    # a long line cut short: the over-long line being skipped when the stream ends
    long = gzip.compress(b'{"text": "a"}\n' + b'{"text": "' + b"z" * (2 * LIMIT) + b'"}\n')
    p = tmp_path / "cut-long.jsonl.gz"
    p.write_bytes(long[: len(long) - 20])
    for block in (1000, BLOCK_BYTES):
        out = same_as_oracle(p, cfg, block)
        assert [getattr(r, "reason", "") for r in out][-2:] == ["truncated_or_corrupt_stream", ""]


def random_float(rng: random.Random) -> float:
    while True:
        v: float = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(v):
            return v


def random_text(rng: random.Random) -> str:
    pool = 'ab "\\/\n\r\t\b\f\x00\x1f\x7f\u00e9\u2028\u4e2d\U0001f600{}[],:'
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))


def test_random_values_read_the_same(tmp_path: Path) -> None:
    """Floats of random bits and magnitudes, random strings and keys, as Python dumps them."""
    rng = random.Random(11)
    docs = []
    for i in range(10_000):
        meta: dict[str, Any] = {
            random_text(rng): random_float(rng),
            "m": rng.random() * 10 ** rng.randint(-30, 30),
            "tie": rng.getrandbits(52) / 4,  # shortest digits that may end on a tie (Python: to even)
            "r": [round(rng.uniform(-1e6, 1e6), rng.randint(0, 8)), rng.randint(-(10**20), 10**20)],
            "s": {random_text(rng): random_text(rng) for _ in range(3)},
        }
        doc = {"text": random_text(rng), "id": rng.choice([i, str(i % 500), random_float(rng), None]), **meta}
        docs.append(json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode() + b"\n")
    path = tmp_path / "random.jsonl"
    path.write_bytes(b"".join(docs))
    cfg = ReadConfig(batch_size=128)
    out = same_as_oracle(path, cfg, 1 << 14)
    assert sum(b.num_rows for b in out if isinstance(b, pa.RecordBatch)) == fast_docs(path, cfg) == 10_000


@pytest.mark.parametrize("batch_size", [1, 2, 1000])
def test_batches_are_cut_at_batch_size(tmp_path: Path, batch_size: int) -> None:
    """Runs of fast documents and documents of fallback lines mix in batches of exactly batch_size."""
    lines = [json.dumps({"text": f"doc {i}", "id": i % 7}).encode() + b"\n" for i in range(50)]
    lines[10] = b'{"text": "nan", "m": NaN}\n'
    lines[11] = b"not json\n"
    lines[30] = b'{"text": "lone \\udc00"}\n'
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(lines))
    cfg = ReadConfig(batch_size=batch_size)
    out = same_as_oracle(path, cfg, 100)
    sizes = [b.num_rows for b in out if isinstance(b, pa.RecordBatch)]
    assert all(n == batch_size for n in sizes[:-1]) and sum(sizes) == 48
