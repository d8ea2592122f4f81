"""Line dedup across a corpus: llmpipe's ``line_dedup`` stage vs datatrove 0.9's ``SentenceDedup``,
same JSONL, same run, each in a child process (wall, CPU and peak RSS of the child).

The peer is configured as close to line dedup as it goes: ``split_sentences=False`` (it splits on
``\\n``), ``n_sentences=1``, no minimum document words or sentences. The difference that stays: it
removes repeats of its own normalised lines (``simplify_text``) keeping the first occurrence in its
own order; llmpipe removes lines whose key (``" ".join(line.split()).lower()``) is in more than one
document, keeping the first document by id. Both read the JSONL and write their output documents.

Corpus: real paragraphs (bench_curate's: reference books, Jargon File, GCIDE, extracted CC pages)
recombined into documents, so lines repeat across documents as boilerplate does.

Usage: python bench/bench_line_dedup.py [--mb 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run_llmpipe(src: Path, work: Path) -> None:
    """Stream the JSONL: keys per block, resolve (hash partitions on disk), stream again: rewrite, write."""
    import pyarrow as pa
    import pyarrow.json as pajson
    import pyarrow.parquet as pq
    from llmpipe.curate.stage import RunContext, StageCounts
    from llmpipe.curate.stages.line_dedup import LineDedup

    stage = LineDedup(LineDedup.Config(enabled=True, unit="line", max_occurrences=1, keep_first=True))

    def batches() -> Iterator[pa.RecordBatch]:  # the JSONL streamed in blocks, twice: keys, rewrite
        opts = pajson.ReadOptions(block_size=8 << 20)
        for b in pajson.open_json(src, read_options=opts):
            yield b.select(["id", "text"])

    keys = []
    for j, batch in enumerate(batches()):
        f = work / f"{j:05d}.keys.parquet"
        pq.write_table(stage.prepare(batch), f)
        keys.append(f)
    stage.resolve(keys, work / "global", RunContext(input_words=0))
    counts = StageCounts(stage.name)
    with pq.ParquetWriter(work / "out.parquet", pa.schema([("id", pa.string()), ("text", pa.string())])) as w:
        for j, batch in enumerate(batches()):  # the same blocks: block j's keys are keys[j]
            rewrite = stage.rewriter(work / "global", keys[j])
            w.write_batch(rewrite.run(batch, counts).select(["id", "text"]))
    (work / "stats.json").write_text(json.dumps(counts.to_dict()))


def run_datatrove(src: Path, work: Path) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.sentence_dedup import (
        SentDedupConfig,
        SentenceDedupFilter,
        SentenceDedupSignature,
        SentenceFindDedups,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    cfg = SentDedupConfig(n_sentences=1, split_sentences=False, min_doc_words=0, min_num_sentences=0)
    kw = {"logging_dir": str(work / "logs"), "skip_completed": False}
    reader = str(src.parent)
    LocalPipelineExecutor(
        [JsonlReader(reader, glob_pattern=src.name), SentenceDedupSignature(str(work / "sigs"), config=cfg)],
        tasks=1,
        **kw,
    ).run()
    LocalPipelineExecutor(
        [SentenceFindDedups(str(work / "sigs"), str(work / "dups"), config=cfg)], tasks=1, **kw
    ).run()
    LocalPipelineExecutor(
        [
            JsonlReader(reader, glob_pattern=src.name),
            SentenceDedupFilter(str(work / "dups"), config=cfg),
            JsonlWriter(str(work / "out"), compression=None),
        ],
        tasks=1,
        **kw,
    ).run()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--child", choices=["llmpipe", "datatrove"])
    ap.add_argument("--src")
    ap.add_argument("--work")
    args = ap.parse_args()
    if args.child:
        fn = run_llmpipe if args.child == "llmpipe" else run_datatrove
        fn(Path(args.src), Path(args.work))
        return
    from bench_curate import measure, paragraphs, write_corpus

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_corpus(root / "in", int(args.mb * 1e6), 1, paragraphs())
        src = next((root / "in").glob("*.jsonl"))
        mb = src.stat().st_size / 1e6
        res = {}
        for who in ("llmpipe", "datatrove"):
            work = root / who
            work.mkdir()
            res[who] = measure(
                [sys.executable, __file__, "--child", who, "--src", str(src), "--work", str(work)]
            )
        stats = json.loads((root / "llmpipe" / "stats.json").read_text())
        out_dt = sum(
            len(json.loads(line)["text"].encode())
            for f in (root / "datatrove" / "out").glob("*.jsonl")
            for line in f.open(encoding="utf-8")
        )
        text_in = sum(len(json.loads(line)["text"].encode()) for line in src.open(encoding="utf-8"))
        print(f"{mb:.1f} MB JSONL ({text_in / 1e6:.1f} MB of text), line dedup, 1 process each")
        for who, (wall, cpu, rss) in res.items():
            print(
                f"{who:10s} {wall:7.2f} s wall {cpu:7.2f} CPU-s {mb / cpu:6.2f} MB/CPU-s  peak RSS {rss:7.0f} MB"
            )
        print(
            f"llmpipe removed {stats['counters']['lines_removed']:,} lines, "
            f"{stats['counters']['bytes_removed'] / 1e6:.1f} MB; datatrove removed {(text_in - out_dt) / 1e6:.1f} MB"
        )
        (w1, c1, r1), (w2, c2, r2) = res["llmpipe"], res["datatrove"]
        print(f"ratio (datatrove / llmpipe): CPU {c2 / c1:.1f}, wall {w2 / w1:.1f}, peak RSS {r2 / r1:.2f}")


if __name__ == "__main__":
    main()
