"""URLs for the URL filter's parity test and benchmark: every record URI of the crawl files in
../shared/data/web, plus URLs built from a sample of datatrove's shipped lists (UT1 domains and URLs,
banned words, subwords and soft-banned words) and from ordinary domains."""

from __future__ import annotations

import json
import random
import tarfile
from pathlib import Path

from fastwarc.warc import ArchiveIterator
from llmpipe.io.config import ReadConfig
from llmpipe.io.fs import as_input
from llmpipe.io.read import read_input

ORDINARY = [
    "https://en.wikipedia.org/wiki/Main_Page",
    "http://forums.bbc.co.uk/path/to/file?x=1#y",
    "https://www.gov.uk/",
    "http://localhost:8080/",
    "http://127.0.0.1/admin",
    "http://[2001:db8::1]:80/x",
    "https://user:pw@shop.example.com:443/cart",
    "example.org/no-scheme",
    "//protocol-relative.example.net/a",
    "https://www.city.kawasaki.jp/",
    "http://xn--fiqs8s.xn--55qx5d.cn/",
    "http://foo.bar.ck/",
    "http://www.ck/",
    "https://github.com/huggingface/datatrove",
    "https://docs.python.org/3/library/re.html",
    "HTTPS://WWW.EXAMPLE.COM/UPPER/CASE",
    "http://a.b.c.d.e.blogspot.com/2019/",
    "https://news.ycombinator.com/item?id=1",
    "ftp://files.example.edu/pub/",
    "mailto:someone@example.com",
    "http://example.com./trailing-dot",
    "http://例え.テスト/",
    "https://sub.domain.co.jp/page",
    "",
]


def crawl_urls(web: Path) -> list[str]:
    """Every WARC/ARC record URI of ``web`` (all record types), and the URLs of the documents the
    reader hands on (JSONL ids that are URLs included)."""
    urls: list[str] = []
    for f in sorted(web.iterdir()):
        if ".warc" in f.name:
            with open(f, "rb") as fh:
                for rec in ArchiveIterator(fh, parse_http=False):
                    uri = rec.headers.get("WARC-Target-URI")
                    if uri:
                        urls.append(uri.strip("<>"))
        for item in read_input(as_input(f), f.name, ReadConfig()):
            if hasattr(item, "column") and "meta" in item.schema.names:
                for meta in item.column("meta").to_pylist():
                    m = json.loads(meta) if meta else {}
                    if isinstance(m.get("url"), str):
                        urls.append(m["url"])
        if ".jsonl" in f.name:
            import gzip

            opener = gzip.open if f.suffix == ".gz" else open
            with opener(f, "rt", encoding="utf-8") as fh:
                for line in fh:
                    rid = json.loads(line).get("id")
                    if isinstance(rid, str) and rid.startswith("http"):
                        urls.append(rid)
    return urls


def list_urls(assets: Path, seed: int = 0, per_list: int = 400) -> list[str]:
    """URLs built from a sample of datatrove's shipped lists."""
    rng = random.Random(seed)
    with tarfile.open(assets / "url_filterblacklistsv0_3_0.tar.gz") as tar:
        lists = {}
        for m in tar.getmembers():
            f = tar.extractfile(m) if m.isfile() else None
            if f is not None:
                lists[m.name.rsplit("/", 1)[-1]] = f.read()

    def sample(data: bytes, k: int) -> list[str]:
        """``k`` lines at random byte offsets (no split of the 4.6M lines)."""
        out = []
        for off in sorted(rng.sample(range(len(data)), k)):
            start = data.rfind(b"\n", 0, off) + 1
            end = data.find(b"\n", off)
            out.append(data[start : end if end >= 0 else len(data)].decode("utf-8").strip())
        return [x for x in dict.fromkeys(out) if x and not x.startswith("#")]

    domains = sample(lists["domains"], per_list)
    full = sample(lists["urls"], per_list // 2)
    words = [w.strip() for w in (assets / "banned_words.txt").read_text().splitlines() if w.strip()]
    subwords = [w.strip() for w in (assets / "banned_subwords.txt").read_text().splitlines() if w.strip()]
    soft = [w.strip() for w in (assets / "soft_banned_words.txt").read_text().splitlines() if w.strip()]
    out: list[str] = []
    for d in domains:
        out += [
            f"http://{d}/",
            f"https://www.{d}/page.html",
            f"http://a.b.{d}:8080/x?q=1",
            f"https://{d.upper()}/",
        ]
        out.append(f"https://{d}.example-not-listed.org/")  # the listed name as a subdomain elsewhere
    for u in full:
        out += [u, f"http://{u}", u.rstrip("/") + "/more"]
    for w in rng.sample(words, min(60, len(words))):
        out += [f"https://example.com/{w}/", f"https://example.com/x{w}y", f"https://example.com/{w.upper()}"]
    for w in rng.sample(subwords, min(60, len(subwords))):
        out += [
            f"https://shop.example.org/best{w.replace(' ', '-')}deals",
            f"https://{w.replace(' ', '')}.example.net/",
        ]
    for _ in range(60):
        a, b = rng.sample(soft, 2)
        out += [f"https://example.com/{a}/{b}", f"https://example.com/{a}", f"https://{a}.example.com/{a}"]
    return out
