"""Main-text extraction quality and speed: llmpipe vs trafilatura vs resiliparse, same pages, same run.

Data: trafilatura's evaluation set (../shared/data/html/trafilatura-eval, the pages of
trafilatura-evaldata.json that are there). Each page has snippets that must (``with``) and must not
(``without``) appear in the extracted main text. Scored exactly as trafilatura's own evaluation
(tests/comparison_small.py ``evaluate_result``): a ``with`` snippet found is a true positive, missing
a false negative; a ``without`` snippet found is a false positive, absent a true negative; an
extractor that returns nothing scores its ``with`` snippets as false negatives; precision, recall and
F1 = 2tp / (2tp + fp + fn) over all pages pooled.

Reported on the whole set, on the held-out fifth (every 5th page in file-name order: llmpipe's
heuristics were tuned on the other four fifths only and never looked at these), and on the
article-style pages (those that declare themselves articles: ``og:type`` article or an ``<article>``
element).

Each extractor gets the page's raw bytes, as a crawler has them:
  llmpipe      llmpipe.io.extract.extract (charset detection, decode, resiliparse parse, boilerplate filter)
  trafilatura  trafilatura.extract(bytes), default settings, the installed version
  resiliparse  HTMLTree.parse_from_bytes(detected encoding) + extract_plain_text(main_content=True)
The three run page by page in turn, timed in CPU seconds of this process (time.process_time), so that
other work on a shared machine hits all three alike; the speed ratio is trafilatura's CPU time over
each extractor's.

Usage: python bench/bench_extract_f1.py [--quick]   (--quick: every 4th page)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTML = (ROOT / ".." / "shared" / "data" / "html").resolve()
_ARTICLE = re.compile(rb"<article\b|property=[\"']og:type[\"']\s+content=[\"']article|content=[\"']article[\"']\s+property=[\"']og:type", re.I)  # fmt: skip


@dataclass
class Page:
    file: str
    body: bytes
    with_: list[str]
    without: list[str]
    held_out: bool
    article: bool


@dataclass
class Score:
    tp: int = 0
    fn: int = 0
    fp: int = 0
    tn: int = 0

    def add(self, text: str | None, page: Page) -> None:
        if not isinstance(text, str):  # nothing extracted: as trafilatura's evaluation counts it
            self.fn += len(page.with_)
            self.tn += len(page.without)
            return
        for s in page.with_:
            if s in text:
                self.tp += 1
            else:
                self.fn += 1
        for s in page.without:
            if s in text:
                self.fp += 1
            else:
                self.tn += 1

    def prf(self) -> tuple[float, float, float]:
        p = self.tp / max(1, self.tp + self.fp)
        r = self.tp / max(1, self.tp + self.fn)
        return p, r, 2 * self.tp / max(1, 2 * self.tp + self.fp + self.fn)


@dataclass
class Result:
    name: str
    run: Callable[[bytes], str | None]
    cpu: float = 0.0
    scores: dict[str, Score] = field(default_factory=lambda: {k: Score() for k in SUBSETS})


SUBSETS = ("all", "held-out", "tuned", "article-style")


def eval_pages() -> list[Page]:
    """The pages of the evaluation set present on disk, in file-name order; every 5th held out."""
    data = json.loads((HTML / "trafilatura-evaldata.json").read_text(encoding="utf-8"))
    items = sorted(
        (it for it in data.values() if it.get("file") and (HTML / "trafilatura-eval" / it["file"]).is_file()),
        key=lambda it: it["file"],
    )
    pages = []
    for i, it in enumerate(items):
        body = (HTML / "trafilatura-eval" / it["file"]).read_bytes()
        article = _ARTICLE.search(body) is not None
        pages.append(Page(it["file"], body, it.get("with", []), it.get("without", []), i % 5 == 4, article))
    return pages


def extractors() -> list[Result]:
    import trafilatura
    from llmpipe.io.extract import extract
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    def resiliparse(body: bytes) -> str:
        return extract_plain_text(HTMLTree.parse_from_bytes(body, detect_encoding(body)), main_content=True)

    return [
        Result("llmpipe", extract),
        Result(f"trafilatura {trafilatura.__version__}", trafilatura.extract),
        Result("resiliparse", resiliparse),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="every 4th page only")
    args = ap.parse_args()
    pages = eval_pages()
    if args.quick:
        pages = pages[::4]
    results = extractors()
    for r in results:  # warm-up: imports, lazy tables, first-call caches
        r.run(pages[0].body)
    for page in pages:
        for r in results:
            t0 = time.process_time()
            text = r.run(page.body)
            r.cpu += time.process_time() - t0
            for subset, score in r.scores.items():
                if (
                    subset == "all"
                    or (subset == "held-out" and page.held_out)
                    or (subset == "tuned" and not page.held_out)
                    or (subset == "article-style" and page.article)
                ):
                    score.add(text, page)
    counts = {
        "all": len(pages),
        "held-out": sum(p.held_out for p in pages),
        "tuned": sum(not p.held_out for p in pages),
        "article-style": sum(p.article for p in pages),
    }
    mb = sum(len(p.body) for p in pages) / 1e6
    print(f"trafilatura evaluation set: {len(pages)} pages, {mb:.1f} MB of HTML; "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))  # fmt: skip
    traf = results[1]
    for subset in SUBSETS:
        print(f"\n{subset} ({counts[subset]} pages)")
        print(f"  {'':20s} {'precision':>9s} {'recall':>7s} {'F1':>7s}   tp / fn / fp / tn")
        for r in results:
            s = r.scores[subset]
            p, rc, f = r.scores[subset].prf()
            print(f"  {r.name:20s} {p:9.3f} {rc:7.3f} {f:7.4f}   {s.tp} / {s.fn} / {s.fp} / {s.tn}")
    print(
        f"\n{'speed (CPU s of this process)':30s} {'CPU s':>7s} {'ms/page':>8s} {'MB/CPU-s':>9s} {'vs trafilatura':>15s}"
    )
    for r in results:
        print(
            f"  {r.name:28s} {r.cpu:7.2f} {1000 * r.cpu / len(pages):8.2f} {mb / r.cpu:9.2f} {traf.cpu / r.cpu:14.1f}x"
        )
    f_ours, f_traf = results[0].scores["all"].prf()[2], traf.scores["all"].prf()[2]
    h_ours, h_traf = results[0].scores["held-out"].prf()[2], traf.scores["held-out"].prf()[2]
    print(f"\nF1 llmpipe - trafilatura: all {f_ours - f_traf:+.4f}, held-out {h_ours - h_traf:+.4f}; "
          f"speed {traf.cpu / results[0].cpu:.1f}x per CPU-s (goal: F1 >= trafilatura's at >= 8x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
