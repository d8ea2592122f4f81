"""URL filter: llmpipe's ``url_filter`` stage core vs datatrove 0.9's ``URLFilter``, same lists, same URLs.

Both filters load the lists datatrove ships (UT1's 4.6M domains and 20k URLs, its banned words,
subwords and soft-banned words). The URLs are every record URI of ../shared/data/web plus URLs built
from a sample of those lists and ordinary domains (tests/url_corpus.py), repeated to ``--urls``.
Timed on one core (CPU seconds of this process; the Rust call told to use one thread): loading the
lists, and judging every URL (datatrove: ``filter`` per document; llmpipe: one call per batch of
``--batch`` URLs). The decisions are checked equal before the timings are printed.

Usage: python bench/bench_url_filter.py [--urls 200000] [--batch 10000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "data").resolve()
sys.path.insert(0, str(ROOT / "tests"))  # the URL corpus the parity test uses

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from llmpipe.buffers import string_buffers  # noqa: E402
from llmpipe.curate.stages.url_filter import REASONS, UrlFilter  # noqa: E402
from url_corpus import ORDINARY, crawl_urls, list_urls  # noqa: E402

DT = {
    "domain": "url_domain",
    "subdomain": "url_subdomain",
    "url": "url_url",
    "hard_blacklisted": "url_word",
    "soft_blacklisted": "url_soft_word",
    "blacklisted_subword": "url_subword",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=10_000)
    args = ap.parse_args()

    import datatrove
    from datatrove.data import Document
    from datatrove.pipeline.filters.url_filter import URLFilter
    from tldextract import TLDExtract

    assets = Path(datatrove.__file__).parent / "assets"
    base = [u for u in sorted(set(crawl_urls(DATA / "web") + list_urls(assets) + ORDINARY)) if u]
    urls = (base * (args.urls // len(base) + 1))[: args.urls]
    print(f"{len(urls):,} URLs ({len(base):,} distinct), batches of {args.batch:,}")

    t = time.process_time()
    cfg = UrlFilter.Config(
        enabled=True,
        blocklists=[str(assets / "url_filterblacklistsv0_3_0.tar.gz")],
        banned_words=[str(assets / "banned_words.txt")],
        banned_subwords=[str(assets / "banned_subwords.txt")],
        soft_banned_words=[str(assets / "soft_banned_words.txt")],
    )
    core = UrlFilter(cfg).core
    load_mine = time.process_time() - t
    t = time.process_time()
    codes = []
    for i in range(0, len(urls), args.batch):
        codes.append(
            np.frombuffer(core.judge_urls(string_buffers(pa.array(urls[i : i + args.batch]))), np.uint8)
        )
    mine_s = time.process_time() - t
    mine = [REASONS[c] for c in np.concatenate(codes).tolist()]

    t = time.process_time()
    dt = URLFilter()
    dt.tldextractor = TLDExtract(suffix_list_urls=())
    dt.download_data()
    dt.tldextractor("http://warm.up.example.com")  # its suffix list is read on first use
    load_dt = time.process_time() - t
    docs = [Document(text="", id=str(i), metadata={"url": u}) for i, u in enumerate(urls)]
    t = time.process_time()
    theirs = []
    for d in docs:
        got = dt.filter(d)
        theirs.append(None if got is True else DT[got[1]])
    dt_s = time.process_time() - t
    same = sum(a == b for a, b in zip(mine, theirs, strict=True))
    assert same == len(urls), f"decisions differ on {len(urls) - same} URLs"
    dropped = sum(r is not None for r in mine)
    print(f"same decisions on {same:,}/{len(urls):,} URLs ({dropped:,} dropped)")
    print(
        f"load lists   llmpipe {load_mine:6.2f} CPU-s   datatrove {load_dt:6.2f} CPU-s   ratio {load_dt / load_mine:.2f}"
    )
    print(
        f"judge URLs   llmpipe {len(urls) / mine_s / 1e6:6.2f} M URLs/CPU-s ({mine_s:.3f} s)   "
        f"datatrove {len(urls) / dt_s / 1e6:6.3f} M URLs/CPU-s ({dt_s:.2f} s)   ratio {dt_s / mine_s:.1f}"
    )


if __name__ == "__main__":
    main()
