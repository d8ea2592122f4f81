"""Decontamination: llmpipe's ``decontaminate`` stage vs datatrove 0.9's n-gram decontamination, same
documents, same evaluation texts, same run, one core (CPU seconds of this process).

Peer: datatrove's ``NGramsDecontIndexer`` / ``NGramsDecontFilter`` (``datatrove.pipeline.decont``) with
``n_grams=13``. Its indexer step requires lighteval and its ``run`` loads lighteval tasks (a download);
instead the evaluation texts are fed to the indexer's own ``compute_hashes`` (called on a namespace
holding what it reads: its word tokenizer, config and hash function; each text as a label without
query, as the indexer hashes a gold answer) and written as its index files, which
``NGramsDecontFilter`` then loads as it does in a pipeline. Its normalisation differs from lm-eval's (``simplify_text`` and spaCy word tokens against
ASCII punctuation deleted and ``str.split``), so the two flag nearly, not exactly, the same
documents: both counts are printed, and each must find every planted passage.

Data: documents of real paragraphs (bench_curate's corpus without the two books used as evaluation
sets), with passages of 20 words of the evaluation texts planted in 1% of them. Evaluation sets:
Alice in Wonderland paragraphs and Shakespeare speeches (as tests/test_decontaminate.py). Timed:
building the n-gram index of the evaluation sets, and judging every document (llmpipe: one call per
batch of ``--batch`` documents; datatrove: ``filter`` per document, as its pipeline calls it).
``mode: spans`` (cutting the matching spans) is timed on the same batches too.

Usage: python bench/bench_decontaminate.py [--mb 20] [--batch 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

N = 13


def corpus(mb: float, eval_texts: list[str], seed: int = 0) -> tuple[list[str], set[int]]:
    """Documents of 3-40 paragraphs up to ``mb`` MB; 1% with a planted 20-word evaluation passage."""
    from bench_curate import DATA, paragraphs

    books = DATA / "reference" / "books"
    exclude = {
        p.strip()
        for name in ("wonderland.txt", "tiny-shakespeare.txt")
        for p in (books / name).read_text(encoding="utf-8").split("\n\n")
    }
    paras = [p for p in paragraphs() if p not in exclude]
    rng = random.Random(seed)
    docs: list[str] = []
    size = 0
    while size < mb * 1e6:
        docs.append("\n\n".join(rng.choice(paras) for _ in range(rng.randint(3, 40))))
        size += len(docs[-1].encode())
    planted = set(rng.sample(range(len(docs)), max(1, len(docs) // 100)))
    for i in sorted(planted):
        words = rng.choice(eval_texts).split()
        at = rng.randrange(0, len(words) - 20)
        cut = len(docs[i]) // 2
        docs[i] = docs[i][:cut] + "\n" + " ".join(words[at : at + 20]) + "\n" + docs[i][cut:]
    return docs, planted


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--batch", type=int, default=2000)
    args = ap.parse_args()

    import importlib.metadata  # noqa: F401  (datatrove's import check needs it loaded)

    import pyarrow as pa
    import pyarrow.parquet as pq
    from bench_curate import DATA
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
    from datatrove.utils.hashing import create_hash_func
    from datatrove.utils.typeshelper import Languages
    from datatrove.utils.word_tokenizers import load_word_tokenizer
    from llmpipe.curate.stage import StageCounts
    from llmpipe.curate.stages.decontaminate import Decontaminate

    books = DATA / "reference" / "books"
    alice = [p.replace("\n", " ") for p in (books / "wonderland.txt").read_text().split("\n\n")]
    alice = [p for p in alice if len(p.split()) >= 30]
    speeches = [s for s in (books / "tiny-shakespeare.txt").read_text().split("\n\n") if len(s.split()) >= 30]
    sets = {"alice": alice, "shakespeare": speeches}
    docs, planted = corpus(args.mb, alice + speeches)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(
        f"{len(docs):,} documents, {mb:.1f} MB; {len(planted)} planted passages; evaluation sets: "
        + ", ".join(f"{k} ({len(v)} texts)" for k, v in sets.items())
        + f"; {N}-grams, one core"
    )

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "alice.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in alice))
        pq.write_table(pa.table({"text": speeches}), root / "shakespeare.parquet")
        eval_sets = {"alice": str(root / "alice.jsonl"), "shakespeare": str(root / "shakespeare.parquet")}

        # llmpipe: the stage as curate builds it, document mode then spans mode
        t = time.process_time()
        stage = Decontaminate(Decontaminate.Config(enabled=True, eval_sets=eval_sets, ngram=N))
        _ = stage.table
        index_mine = time.process_time() - t
        batches = [
            pa.RecordBatch.from_pydict(
                {"id": [str(j) for j in range(i, i + args.batch)][: len(chunk)], "text": chunk}
            )
            for i in range(0, len(docs), args.batch)
            for chunk in [docs[i : i + args.batch]]
        ]
        t = time.process_time()
        flagged_mine = set()
        for b in batches:
            for j, r in zip(b.column("id").to_pylist(), stage.reasons(b), strict=True):
                if r:
                    flagged_mine.add(int(j))
        judge_mine = time.process_time() - t
        spans = Decontaminate.from_config(
            Decontaminate.Config(enabled=True, eval_sets=eval_sets, ngram=N, mode="spans")
        )
        assert spans is not None
        _ = spans.judge.table  # type: ignore[union-attr]
        t = time.process_time()
        counts = StageCounts("decontaminate")
        for b in batches:
            spans.run(b, counts)
        cut_mine = time.process_time() - t

        # datatrove: its indexer's hashes of the same texts, as its index files; its filter per document
        cfg = NGramsDecontConfig(n_grams=N, find_query_ngrams=False, find_overlap_ngrams=False)
        t = time.process_time()
        import numpy as np

        indexer = SimpleNamespace(  # what NGramsDecontIndexer.__init__ sets and compute_hashes reads
            config=cfg,
            tokenizer=load_word_tokenizer(Languages.english),
            hash_func=create_hash_func(cfg.hash_config),
        )
        (root / "dt-index").mkdir()
        for name, texts in sets.items():
            hashes = {h for text in texts for h in NGramsDecontIndexer.compute_hashes(indexer, text)}  # type: ignore[arg-type]
            np.array(sorted(hashes), dtype=cfg.hash_config.np_descr).tofile(
                root / "dt-index" / f"{name}.index.hashes"
            )
        dt = NGramsDecontFilter(str(root / "dt-index"), config=cfg)
        dt.load_index_hashes()
        index_dt = time.process_time() - t
        t = time.process_time()
        flagged_dt = set()
        for i, text in enumerate(docs):
            if dt.filter(Document(text=text, id=str(i))) is not True:
                flagged_dt.add(i)
        judge_dt = time.process_time() - t

    assert planted <= flagged_mine, "llmpipe missed a planted passage"
    assert planted <= flagged_dt, "datatrove missed a planted passage"
    both = len(flagged_mine & flagged_dt)
    print(
        f"flagged: llmpipe {len(flagged_mine):,}, datatrove {len(flagged_dt):,}, both {both:,} "
        f"(planted {len(planted)}: found by both)"
    )
    print(
        f"llmpipe    index {index_mine:6.2f} CPU-s  judge {judge_mine:7.2f} CPU-s  {mb / judge_mine:8.2f} MB/CPU-s"
    )
    print(
        f"llmpipe spans mode (cut {counts.counters['spans_removed']:,} spans, "
        f"{counts.counters['bytes_removed'] / 1e3:.1f} kB): {cut_mine:7.2f} CPU-s  {mb / cut_mine:8.2f} MB/CPU-s"
    )
    print(
        f"datatrove  index {index_dt:6.2f} CPU-s  judge {judge_dt:7.2f} CPU-s  {mb / judge_dt:8.2f} MB/CPU-s"
    )
    print(
        f"ratio (datatrove / llmpipe): judge {judge_dt / judge_mine:.1f}, index {index_dt / index_mine:.1f}"
    )


if __name__ == "__main__":
    main()
