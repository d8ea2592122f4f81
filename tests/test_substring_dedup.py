"""Exact-substring dedup (``substring_dedup``) against a brute-force search on real crawl text.

The oracle joins the documents in id order and marks every window of ``min_length`` bytes (inside
one document) whose bytes already started at an earlier position, via a dict of first positions;
the marked bytes, as runs trimmed to whole UTF-8 characters, are the spans to remove. The stage
runs its real phases with small partitions, so most repeats are found across partitions. The
partition plan (an external sort of the documents by id) is checked against an in-memory sort.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from llmpipe import _core
from llmpipe.curate.stage import RunContext, StageCounts
from llmpipe.curate.stages import substring_dedup
from llmpipe.curate.stages.substring_dedup import SubstringDedup, plan_partitions, spans_file


def _docs(data_dir: Path, n: int) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            ids.append(str(d["id"]))
            texts.append(d["text"])
    # a slice of the crawl (its exact-duplicate groups and boilerplate included), plus non-ASCII text
    return ids[:n], texts[:n]


def oracle_spans(ids: list[str], texts: list[str], min_length: int) -> dict[str, list[tuple[int, int]]]:
    """Per document: the byte spans a brute-force window search finds repeated (first kept)."""
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    raw = [texts[i].encode() for i in order]
    corpus = b"\xff".join(raw)
    diff = np.zeros(len(corpus) + 1, np.int64)
    first: dict[bytes, int] = {}
    at = 0
    for r in raw:
        for s in range(at, at + len(r) - min_length + 1):
            w = corpus[s : s + min_length]
            if first.setdefault(w, s) < s:
                diff[s] += 1
                diff[s + min_length] -= 1
        at += len(r) + 1
    covered = np.cumsum(diff)[:-1] > 0
    out: dict[str, list[tuple[int, int]]] = {}
    at = 0
    for i, r in zip(order, raw, strict=True):
        spans = []
        c = covered[at : at + len(r)]
        j = 0
        while j < len(r):
            if not c[j]:
                j += 1
                continue
            s = j
            while j < len(r) and c[j]:
                j += 1
            e = j
            while s < e and (r[s] & 0xC0) == 0x80:
                s += 1
            while e > s and e < len(r) and (r[e] & 0xC0) == 0x80:
                e -= 1
            if s < e:
                spans.append((s, e))
        if spans:
            out[ids[i]] = spans
        at += len(r) + 1
    return out


def test_matches_brute_force_on_real_crawl_text(data_dir: Path, tmp_path: Path) -> None:
    ids, texts = _docs(data_dir, 160)
    # a planted repeat that crosses no document: a passage of one text copied into another
    ids.append("zz-planted")
    texts.append("Prefix élan. " + texts[3][100:700] + " suffix")
    min_length = 60
    total = sum(len(t.encode()) for t in texts)
    cfg = SubstringDedup.Config(enabled=True, min_length=min_length, partition_bytes=total // 6)
    stage = SubstringDedup(cfg)
    table = pa.table({"id": ids, "text": texts})
    key_files = []
    for j, start in enumerate(range(0, len(ids), 50)):
        f = tmp_path / f"{j}.keys.parquet"
        pq.write_table(stage.prepare(table.slice(start, 50).to_batches()[0]), f)
        key_files.append(f)
    assert stage.resolve(key_files, tmp_path / "g", RunContext(input_words=0)).num_rows == 0
    assert len(list((tmp_path / "g" / "text").glob("*.bin"))) >= 6  # several partitions, all pairs
    # the spans are kept per key file (an input part), each sorted by (id, start)
    got = []
    for j, f in enumerate(key_files):
        part = pq.read_table(spans_file(tmp_path / "g", f))
        assert set(part["id"].to_pylist()) <= set(ids[50 * j : 50 * j + 50])
        assert part.equals(part.sort_by([("id", "ascending"), ("start", "ascending")]))
        got += part.to_pylist()
    found: dict[str, list[tuple[int, int]]] = {}
    for r in got:
        found.setdefault(r["id"], []).append((r["start"], r["end"]))
    want = oracle_spans(ids, texts, min_length)
    assert found == want
    assert len(want) > 20 and "zz-planted" in want
    s, e = want["zz-planted"][0]
    assert e - s >= 590  # the copied passage, kept in its first document
    assert ids[3] not in want or all(b <= 100 or a >= 700 for a, b in want[ids[3]])

    # the rewrite: every document without its spans, emptied ones dropped with a reason
    counts = StageCounts(stage.name)
    kept = {}
    for j, f in enumerate(key_files):  # each part by the rewriter of its key file (its spans only)
        rewrite = stage.rewriter(tmp_path / "g", f)
        for batch in table.slice(50 * j, 50).to_batches(max_chunksize=40):
            out = rewrite.run(batch, counts)
            kept.update(zip(out.column("id").to_pylist(), out.column("text").to_pylist(), strict=True))
    counts.check()
    removed = 0
    for i, t in zip(ids, texts, strict=True):
        b = t.encode()
        cut = b
        for s, e in reversed(want.get(i, [])):
            cut = cut[:s] + cut[e:]
        removed += len(b) - len(cut)
        if cut.decode().split():
            assert kept[i] == cut.decode()
        else:
            assert i not in kept
    assert counts.counters["bytes_removed"] == removed
    assert counts.dropped.get("empty_after_substring_dedup", 0) == len(ids) - len(kept)
    assert len(ids) - len(kept) > 0  # the crawl's exact duplicates are emptied


def test_suffix_array_and_spans_in_rust_match_naive() -> None:
    doc = "naïve text, naïve text again; naïve"
    text = doc.encode()
    sa = np.frombuffer(_core.suffix_array(text), np.int32)
    assert sa.tolist() == sorted(range(len(text)), key=lambda p: text[p:])
    spans = np.frombuffer(_core.repeated_spans(text, 0, 6), np.int64).reshape(-1, 2).tolist()
    assert [tuple(x) for x in spans] == oracle_spans(["a"], [doc], 6)["a"] == [(13, 24), (31, 38)]


def plan_in_memory(key_files: list[Path], partition_bytes: int) -> list[list[tuple[str, int, int]]]:
    """The partitions as one in-memory sort of every document by (id, key file, row) cuts them."""
    rows = []
    for f, path in enumerate(key_files):
        t = pq.read_table(path)
        for r, (i, text) in enumerate(zip(t["id"].to_pylist(), t["text"].to_pylist(), strict=True)):
            rows.append((i, f, r, len(text.encode())))
    rows.sort()
    parts: list[list[tuple[str, int, int]]] = []
    acc = 0
    for i, f, r, n in rows:
        if acc and acc + n + 1 > partition_bytes:
            acc = 0
        if acc == 0:
            parts.append([])
        parts[-1].append((i, f, r))
        acc += n + 1
    return parts


def test_plan_external_sort_equals_in_memory_sort(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, texts = _docs(data_dir, 697)
    # ids as curate writes them, one thrice (in three key files: the key file, then the row, decide),
    # and ids whose UTF-8 bytes sort them (Arrow's order) as their code points do (Python's)
    ids = [f"cc-main-2019-30-extracted.jsonl.gz/{i}" for i in range(len(ids))]
    ids[95] = ids[500] = ids[50]  # rows 50 of key file 0, 5 of 1 and 90 of 3
    ids[:4] = ["zz", "zé", "z\uffff", "z\U0001f600"]
    texts[7] = texts[7] * 40  # a document over the smallest partition size: alone in its partition
    stage = SubstringDedup(SubstringDedup.Config(enabled=True))
    table = pa.table({"id": ids, "text": texts})
    key_files = []
    for j, (start, end) in enumerate([(0, 90), (90, 100), (100, 410), (410, 697)]):  # uneven parts
        key_files.append(tmp_path / f"{j}.keys.parquet")
        keys = stage.prepare(table.slice(start, end - start).to_batches()[0])
        pq.write_table(keys, key_files[-1], row_group_size=37)  # read a row group at a time
    total = sum(len(t.encode()) + 1 for t in texts)
    # tiny runs (16 rows), batches (4 rows), merges (4 runs: 45 runs, two merge levels), row groups
    # (5 rows) and copies of pieces (every 2); and the defaults (a run per key file, merged at once)
    tiny = {"run_rows": 16, "block_rows": 4, "fan_in": 4}
    cases = [(total // 40, tiny), (total // 7, tiny), (total // 40, {}), (total // 7, {}), (total, {})]
    for n, (partition_bytes, kw) in enumerate(cases):
        want = plan_in_memory(key_files, partition_bytes)
        out = tmp_path / f"plan-{n}"
        with monkeypatch.context() as m:
            if kw:
                m.setattr(substring_dedup, "PLAN_ROW_GROUP", 5)
                m.setattr(substring_dedup, "COMPACT_PIECES", 2)
            plans = plan_partitions(key_files, partition_bytes, out, **kw)  # type: ignore[arg-type]
        got = [[(r["id"], r["file"], r["row"]) for r in pq.read_table(p).to_pylist()] for p in plans]
        assert got == want, (partition_bytes, kw)
        assert not (out / "runs").exists() and not (out / "merged").exists()  # removed once whole
        assert plan_partitions(key_files, partition_bytes, out) == plans  # done: read back, not redone
    assert len(want) == 1 and 7 <= len(plan_in_memory(key_files, total // 7)) < 20
    small = plan_in_memory(key_files, total // 40)
    assert len(small) > 40 and [(ids[7], 0, 7)] in small  # its text 40 times: over, alone
