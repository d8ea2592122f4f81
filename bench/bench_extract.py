"""Crawl input: end-to-end `curate` of WARC input vs the extraction stage alone, MB of raw WARC/s/core.

Data: the 884 real pages of trafilatura's evaluation set (../shared/data/html/trafilatura-eval, 129 MB
of HTML in several charsets), written here as a Common-Crawl-style WARC (one gzip member per record,
request + response per page, as CC does), followed by the real WARCs in ../shared/data/web. "MB of raw
WARC" counts the uncompressed WARC bytes, the unit Common Crawl sizes are quoted in.

Measured in one process as CPU seconds (time.process_time: robust to other processes competing for
the cores of a shared machine; "per core" is then exact), the Rust stages told to use one thread:

  library floor   resiliparse HTMLTree.parse + extract_plain_text on already-decoded pages
  extract alone   llmpipe's read step: FastWARC parse + charset detection + decode + extraction
  end to end      llmpipe.curate.run_curate on the WARC: every stage, tokenizer training, tokenize, pack

Both llmpipe figures are the best of 3 rounds, each round one extract-alone run then one end-to-end
run, after a warm-up of each (``--quick``: one round).

and prints the time per stage of the end-to-end run (instrumented by wrapping the stage methods) and
the ratios. trafilatura (the datatrove default extractor) is timed on the same pages if installed.

Usage: python bench/bench_extract.py [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # per core: the Rust stages run on one thread too

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "data").resolve()


def build_warc(pages: list[Path], out: Path) -> int:
    """Write ``pages`` as request+response records (gzip member each) plus the real WARCs; raw bytes."""
    raw = 0
    with open(out, "wb") as f:
        for n, page in enumerate(pages):
            body = page.read_bytes()
            url = f"https://example.org/{page.stem}"
            http_req = f"GET /{page.stem} HTTP/1.1\r\nHost: example.org\r\n\r\n".encode()
            http_resp = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + body
            for kind, block in (("request", http_req), ("response", http_resp)):
                head = (
                    f"WARC/1.0\r\nWARC-Type: {kind}\r\nWARC-Record-ID: <urn:uuid:{uuid.UUID(int=2 * n + (kind == 'response'))}>\r\n"
                    f"WARC-Target-URI: {url}\r\nWARC-Date: 2024-05-18T01:58:10Z\r\n"
                    f"Content-Type: application/http;msgtype={kind}\r\nContent-Length: {len(block)}\r\n\r\n"
                ).encode()
                record = head + block + b"\r\n\r\n"
                raw += len(record)
                f.write(gzip.compress(record, compresslevel=6, mtime=0))
        for real in sorted((DATA / "web").glob("*.warc.gz")):
            if "truncated" in real.name:
                continue
            raw += len(gzip.decompress(real.read_bytes()))
            f.write(real.read_bytes())
    return raw


class Timer:
    """Accumulates wall time per name, by wrapping functions, methods and generators."""

    def __init__(self) -> None:
        self.t: dict[str, float] = defaultdict(float)

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                self.t[name] += time.process_time() - t0

        setattr(owner, attr, timed)

    def wrap_gen(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def timed(*a: Any, **kw: Any) -> Iterator[Any]:
            it = fn(*a, **kw)
            while True:
                t0 = time.process_time()
                try:
                    item = next(it)
                except StopIteration:
                    self.t[name] += time.process_time() - t0
                    return
                self.t[name] += time.process_time() - t0
                yield item

        setattr(owner, attr, timed)


def best_of(n: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(n):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="150 pages instead of all 884, one repetition")
    args = ap.parse_args()
    import pyarrow as pa

    pa.set_cpu_count(1)  # Arrow's compute and Parquet threads: one core, like everything else here
    pa.set_io_thread_count(1)
    from llmpipe.curate.stage import StageCounts
    from llmpipe.curate.steps import read_documents
    from llmpipe.io.config import ReadConfig
    from llmpipe.io.extract import decode
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    pages = sorted((DATA / "html" / "trafilatura-eval").glob("*.html"))
    if args.quick:
        pages = pages[:150]
    reps = 1 if args.quick else 3
    tmp = Path(tempfile.mkdtemp(prefix="bench_extract_"))
    warc = tmp / "in" / "bench.warc.gz"
    warc.parent.mkdir()
    raw = build_warc(pages, warc)
    mb = raw / 1e6
    html_mb = sum(p.stat().st_size for p in pages) / 1e6
    print(f"input: {len(pages)} pages + the real CC/wget WARCs = {mb:.1f} MB raw WARC "
          f"({warc.stat().st_size / 1e6:.1f} MB gzip), {html_mb:.1f} MB of HTML")  # fmt: skip

    # library floor: resiliparse on already-decoded strings
    decoded = [decode(p.read_bytes()) for p in pages]
    t_floor = best_of(
        reps, lambda: [extract_plain_text(HTMLTree.parse(h), main_content=True) for h in decoded]
    )

    # the read step alone: FastWARC + charset + decode + extraction, counted as the pipeline counts it
    def read_only() -> int:
        r, e = StageCounts("read"), StageCounts("extract")
        return sum(b.num_rows for b in read_documents(warc, warc.name, ReadConfig(), lambda b: None, r, e))

    docs = read_only()  # warm-up (lazy imports, page cache)

    trafilatura_s = None
    if importlib.util.find_spec("trafilatura") is not None:
        import trafilatura

        t0 = time.process_time()
        for h in decoded:
            trafilatura.extract(h)
        trafilatura_s = time.process_time() - t0

    # end to end, instrumented
    import llmpipe.curate.pipeline as pipeline
    import llmpipe.curate.steps as steps
    from llmpipe.curate import stage as stage_mod
    from llmpipe.curate.executors import LocalExecutor
    from llmpipe.curate.settings import CurateConfig
    from llmpipe.curate.stages import exact_dedup
    from llmpipe.curate.stages.pack import Pack
    from llmpipe.curate.stages.tokenize import TrainTokenizer

    timer = Timer()
    timer.wrap_gen(steps, "read_documents", "read + extract")
    for st in CurateConfig.from_mapping({}).build_stages():
        cls = type(st)
        if isinstance(st, stage_mod.GlobalStage):
            timer.wrap(cls, "prepare", f"{st.name} (map)")
            timer.wrap(cls, "resolve", f"{st.name} (resolve)")
        else:
            timer.wrap(cls, "run", st.name)
    del exact_dedup
    timer.wrap(TrainTokenizer, "run", "tokenizer training")
    timer.wrap(pipeline, "tokenize_input", "tokenize")
    timer.wrap(Pack, "run", "pack")
    cfg = CurateConfig.from_mapping(
        {"tokenizer": {"vocab_size": 8000, "sample_bytes": 5_000_000}, "pack": {"seq_len": 1024}}
    )
    # measured like the extract stage and interleaved with it (so both see the same machine): one
    # warm-up run (lazy imports, regex and model initialisation, page cache), then ``reps`` rounds of
    # (extract stage alone, end to end into a fresh output directory); the best of each is reported
    best: tuple[float, dict[str, float], Any] | None = None
    t_extract = float("inf")
    for rep in range(reps + 1):
        if rep > 0:
            t_extract = min(t_extract, best_of(1, read_only))
        timer.t.clear()
        t0 = time.process_time()
        stats = pipeline.run_curate(
            [str(warc.parent)],
            tmp / f"out{rep}",
            cfg,
            executor=LocalExecutor(progress=False),
            log=lambda s: None,
        )
        t_run = time.process_time() - t0
        if rep > 0 and (best is None or t_run < best[0]):
            best = (t_run, dict(timer.t), stats)
    assert best is not None
    t_e2e, per_stage, stats = best
    timer.t = defaultdict(float, per_stage)
    timer.t["other (driver, parquet I/O, markers)"] = t_e2e - sum(per_stage.values())

    print(f"\n{'':38s} {'CPU s':>8s} {'MB/s/core':>10s}")
    print(f"{'resiliparse floor (decoded pages)':38s} {t_floor:8.2f} {html_mb / t_floor:10.1f}  (MB of HTML)")
    print(
        f"{'llmpipe read + extract stage alone':38s} {t_extract:8.2f} {mb / t_extract:10.1f}  ({docs} docs)"
    )
    if trafilatura_s is not None:
        print(f"{'trafilatura.extract (decoded pages)':38s} {trafilatura_s:8.2f} {html_mb / trafilatura_s:10.1f}  (MB of HTML)")  # fmt: skip
    else:
        print("trafilatura: not installed in this environment (not in requirements.lock), not measured")
    print(f"{'llmpipe curate end to end':38s} {t_e2e:8.2f} {mb / t_e2e:10.1f}")
    print("\nend-to-end time per stage:")
    for name, t in timer.t.items():
        print(f"  {name:36s} {t:8.2f}s {100 * t / t_e2e:5.1f}%")
    r = stats["retention"]
    print(f"\nretention: {r['docs_out']} of {r['docs_in']} records kept as documents; "
          f"{r['words_out']:,} of {r['words_in']:,} raw HTML words ({100 * r['word_fraction']:.1f}%), "
          f"{r['tokens_out']:,} tokens")  # fmt: skip
    from stage_keep import keep_lines

    print("what each stage saw and kept:")
    print("\n".join(keep_lines(stats)))
    print("\nratios:")
    print(f"  end to end / extract stage alone      {t_e2e / t_extract:.2f}x   (goal <= 1.25x)")
    no_tok = t_e2e - timer.t["tokenizer training"]
    print(f"  same, without tokenizer training      {no_tok / t_extract:.2f}x")
    print(f"  extract stage / resiliparse floor     {t_extract / t_floor:.2f}x   (FastWARC, charset, decode, boilerplate filter, counting)")  # fmt: skip
    if trafilatura_s is not None:
        print(f"  trafilatura / resiliparse floor       {trafilatura_s / t_floor:.2f}x")
    import shutil

    shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
