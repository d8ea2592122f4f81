"""Real documents for the quality tests and benchmark, read from ../shared/data by path."""

from __future__ import annotations

import gzip
import json
import tarfile
import zipfile
from pathlib import Path

WEB_JSONL = (
    "cc-main-2019-30-extracted.jsonl.gz",
    "cc-main-2023-06-sample.jsonl.gz",
    "cc-en-head-0091.jsonl",
    "cc-en-head-0174.jsonl",
)


def web_docs(data: Path) -> list[str]:
    """Every document of the crawl JSONL files (raw web text, boilerplate and all)."""
    out: list[str] = []
    for name in WEB_JSONL:
        p = data / "web" / name
        opener = gzip.open if name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            out += [json.loads(line)["text"] for line in f if line.strip()]
    return out


def zip_texts(path: Path, limit: int | None = None) -> list[str]:
    """The .txt members of an nltk corpus zip, decoded (latin-1 fallback)."""
    out: list[str] = []
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/") and "README" not in n)
        for n in names[:limit]:
            raw = z.read(n)
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(raw.decode("latin-1"))
    return out


def chunks(text: str, lines_per_doc: int) -> list[str]:
    lines = text.splitlines()
    return ["\n".join(lines[i : i + lines_per_doc]) for i in range(0, len(lines), lines_per_doc)]


def reference_docs(data: Path, per_source: int = 60) -> list[str]:
    """Well-written text: speeches, news, books, Python documentation (several hundred documents)."""
    ref = data / "reference"
    nltk = ref / "nltk"
    out: list[str] = []
    out += zip_texts(nltk / "inaugural.zip", per_source)
    out += zip_texts(nltk / "state_union.zip", per_source)
    for text in zip_texts(nltk / "abc.zip"):
        out += chunks(text, 40)[:per_source]
    for book in ("wonderland.txt", "tiny-shakespeare.txt"):
        out += chunks((ref / "books" / book).read_text(encoding="utf-8"), 60)[:per_source]
    out += rst_docs(data, per_source)
    return [d for d in out if d.strip()]


def rst_docs(data: Path, limit: int) -> list[str]:
    out: list[str] = []
    with tarfile.open(data / "reference" / "python-3.11-docs.rst.tar.gz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(".txt") or m.name.endswith(".rst"):
                f = tar.extractfile(m)
                if f is not None:
                    out.append(f.read().decode("utf-8", errors="replace"))
                if len(out) >= limit:
                    break
    return out


def webtext_docs(data: Path, lines_per_doc: int = 40) -> list[str]:
    """nltk webtext (forum posts, chat, reviews), cut into documents."""
    out: list[str] = []
    for text in zip_texts(data / "reference" / "nltk" / "webtext.zip"):
        out += chunks(text, lines_per_doc)
    return [d for d in out if d.strip()]
