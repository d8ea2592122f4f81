"""Text primitives of the curate stages against their peers, on the same real crawl text, one core.

  word counts   llmpipe ``word_counts`` (one Rust call per batch)  vs  ``len(text.split())`` per text
  normalize     llmpipe's normalize stage (one Rust pass)           vs  the pyarrow.compute chain it
                replaced (NFC, 4 regex replaces, trim), kept in tests/test_normalize.py as the oracle
  PII           llmpipe's PII stage (emails, IPs, phones)           vs  datatrove's PIIFormatter
                (emails and IPs only, per text in Python)

Text: every document of ../shared/data/web/*.jsonl[.gz] (crawl text in many languages and scripts),
repeated to ~25 MB. CPU seconds of this process (time.process_time), best of 3 rounds per side.

    python bench/bench_text.py
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # per core

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def texts() -> list[str]:
    out: list[str] = []
    for path in sorted((DATA / "web").glob("*.jsonl*")):
        opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            out += [json.loads(line)["text"] for line in f if line.strip()]
    size = sum(len(t.encode()) for t in out)
    return out * max(1, round(25e6 / size))


def best(fn: Callable[[], Any], rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main() -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    pa.set_cpu_count(1)
    from datatrove.data import Document
    from datatrove.pipeline.formatters import PIIFormatter
    from llmpipe.curate.stage import word_counts
    from llmpipe.curate.stages.normalize import Normalize
    from llmpipe.curate.stages.pii import PiiRedact

    docs = texts()
    mb = sum(len(t.encode()) for t in docs) / 1e6
    batch = pa.record_batch([pa.array(docs, pa.string())], names=["text"])
    col = batch.column("text")

    def arrow_chain() -> pa.Array:
        out = pc.utf8_normalize(col, form="NFC")
        out = pc.replace_substring_regex(out, pattern=r"\r\n?", replacement="\n")
        out = pc.replace_substring_regex(
            out, pattern=r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x{FEFF}]", replacement=""
        )
        out = pc.replace_substring_regex(out, pattern=r"[ \t]+\n", replacement="\n")
        out = pc.replace_substring_regex(out, pattern=r"\n{3,}", replacement="\n\n")
        return pc.utf8_trim_whitespace(out)

    norm = Normalize(Normalize.Config())
    pii = PiiRedact(PiiRedact.Config())
    dt_pii = PIIFormatter()
    dt_docs = [Document(text=t, id=str(i)) for i, t in enumerate(docs)]
    assert word_counts(batch).tolist() == [len(t.split()) for t in docs]

    rows = [
        (
            "word counts",
            lambda: word_counts(batch),
            lambda: [len(t.split()) for t in docs],
            "len(str.split())",
        ),
        ("normalize", lambda: norm.map(batch), arrow_chain, "pyarrow.compute chain"),
        (
            "PII",
            lambda: pii.map(batch),
            lambda: [dt_pii.format(d.text) for d in dt_docs],
            "datatrove PIIFormatter",
        ),
    ]
    print(f"{len(docs):,} documents, {mb:.1f} MB of crawl text, one core, best of 3 (CPU s)\n")
    print(f"{'':14s} {'llmpipe MB/s':>13s} {'peer MB/s':>10s} {'ratio':>7s}  peer")
    for name, ours, peer, peer_name in rows:
        a, b = best(ours), best(peer)
        print(f"{name:14s} {mb / a:13.1f} {mb / b:10.1f} {b / a:6.1f}x  {peer_name}")


if __name__ == "__main__":
    main()
