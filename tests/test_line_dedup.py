"""Line and paragraph dedup across the run (``line_dedup``) against a plain Python count on real crawl text.

The oracle splits each text as ``text.split(sep)``, keys a segment by ``" ".join(seg.split()).lower()``
and counts the documents of each key with a ``Counter`` of per-document sets; the stage must remove
exactly the same segments from every document. The stage runs through its real phases: key files
from batches cut differently, a hash shuffle into several on-disk partitions, one count per
partition, then the rewrite.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from llmpipe.curate.stage import RunContext, StageCounts
from llmpipe.curate.stages import line_dedup
from llmpipe.curate.stages.line_dedup import LineDedup


def _docs(data_dir: Path) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            ids.append(str(d["id"]))
            texts.append(d["text"])
    return ids, texts


def _segments(text: str, sep: str) -> list[str]:
    pieces = text.split(sep)
    return [p + sep for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def oracle(ids: list[str], texts: list[str], cfg: LineDedup.Config) -> dict[str, str]:
    """Each document's text after line dedup, by a plain Python count."""
    sep = "\n" if cfg.unit == "line" else "\n\n"

    def key(seg: str) -> str | None:
        k = " ".join(seg.removesuffix(sep).split()).lower()
        return k if k and len(k) >= cfg.min_chars else None

    docs_of: Counter[str] = Counter()
    first: dict[str, str] = {}
    for i, t in zip(ids, texts, strict=True):
        for k in {key(s) for s in _segments(t, sep)} - {None}:
            assert k is not None
            docs_of[k] += 1
            first[k] = min(first.get(k, i), i)
    out = {}
    for i, t in zip(ids, texts, strict=True):
        kept = []
        for s in _segments(t, sep):
            k = key(s)
            gone = (
                k is not None and docs_of[k] > cfg.max_occurrences and not (cfg.keep_first and first[k] == i)
            )
            if not gone:
                kept.append(s)
        out[i] = "".join(kept)
    return out


def _run_stage(
    ids: list[str], texts: list[str], cfg: LineDedup.Config, work: Path, cut: int
) -> tuple[dict[str, str], StageCounts]:
    stage = LineDedup(cfg)
    table = pa.table({"id": ids, "text": texts})
    key_files = []
    for j, start in enumerate(range(0, len(ids), cut)):
        f = work / f"{j}.keys.parquet"
        pq.write_table(stage.prepare(table.slice(start, cut).to_batches()[0]), f)
        key_files.append(f)
    drops = stage.resolve(key_files, work / "global", RunContext(input_words=0))
    assert drops.num_rows == 0
    counts = StageCounts(stage.name)
    kept = {}
    for j, start in enumerate(range(0, len(ids), cut)):  # each part by the rewriter of its key file
        rewrite = stage.rewriter(work / "global", key_files[j])
        for batch in table.slice(start, cut).to_batches(max_chunksize=97):
            out = rewrite.run(batch, counts)
            kept.update(zip(out.column("id").to_pylist(), out.column("text").to_pylist(), strict=True))
    counts.check()
    return kept, counts


@pytest.mark.parametrize(
    "unit,max_occurrences,keep_first,min_chars",
    [("line", 1, True, 0), ("line", 3, False, 12), ("paragraph", 1, False, 0)],
)
def test_matches_python_count_on_real_crawl_text(
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unit: str,
    max_occurrences: int,
    keep_first: bool,
    min_chars: int,
) -> None:
    ids, texts = _docs(data_dir)
    assert len(set(ids)) == len(ids)
    cfg = LineDedup.Config(
        enabled=True, unit=unit, max_occurrences=max_occurrences, keep_first=keep_first, min_chars=min_chars
    )
    monkeypatch.setattr(line_dedup, "ROWS_PER_PARTITION", 2000)  # several hash partitions on disk
    kept, counts = _run_stage(ids, texts, cfg, tmp_path, cut=250)
    assert len(list((tmp_path / "global" / "counts").iterdir())) > 3
    want = oracle(ids, texts, cfg)
    emptied = {i for i, t in want.items() if not t.split()}
    assert set(kept) == set(ids) - emptied
    for i in kept:
        assert kept[i] == want[i], i
    before = dict(zip(ids, texts, strict=True))
    changed = [i for i in ids if want[i] != before[i]]
    assert len(changed) > 50  # the crawl's boilerplate is found
    assert counts.dropped == ({"empty_after_line_dedup": len(emptied)} if emptied else {})
    removed_bytes = sum(len(before[i].encode()) - len(want[i].encode()) for i in ids)
    assert counts.counters["bytes_removed"] == removed_bytes
    assert counts.modified == len(changed)
