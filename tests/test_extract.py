"""HTML extraction on real pages: trafilatura's annotated evaluation set and real multi-charset crawl pages."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

from llmpipe.curate.stage import StageCounts
from llmpipe.curate.steps import read_documents
from llmpipe.io.config import ReadConfig
from llmpipe.io.extract import charset_of, decode, extract, is_html


def test_trafilatura_eval_snippets(data_dir: Path) -> None:
    """The ``with`` snippets are in the main text and the ``without`` ones are not, for >= 80% of them."""
    html = data_dir / "html"
    evaldata = json.loads((html / "trafilatura-evaldata.json").read_text(encoding="utf-8"))
    found = expected = absent = unexpected = pages = 0
    for item in evaldata.values():
        page = html / "trafilatura-eval" / item["file"]
        if not page.is_file():
            continue
        pages += 1
        text = extract(page.read_bytes())
        for s in item.get("with", []):
            expected += 1
            found += s in text
        for s in item.get("without", []):
            unexpected += 1
            absent += s not in text
    score = (found + absent) / (expected + unexpected)
    print(
        f"trafilatura eval: {pages} pages; 'with' found {found}/{expected} ({found / expected:.1%}), "
        f"'without' absent {absent}/{unexpected} ({absent / unexpected:.1%}); overall {score:.1%}"
    )
    assert pages > 800
    assert score >= 0.80
    assert found / expected >= 0.90  # the main text is kept


def _pages(data_dir: Path) -> dict[str, tuple[str, str]]:
    """url -> (text, meta) for the documents of the multi-charset Common Crawl excerpt."""
    path = data_dir / "web" / "cc-main-2020-34-excerpt.warc.gz"
    read, extract_counts = StageCounts("read"), StageCounts("extract")
    bad: list[object] = []
    out = {}
    for batch in read_documents(path, path.name, ReadConfig(), bad.append, read, extract_counts):
        for row in batch.to_pylist():
            meta = json.loads(row["meta"])
            out[meta["url"]] = (row["text"], meta)
    assert not bad
    assert read.docs_in == 50 and read.docs_out == 16
    return out


def _share(text: str, pred: object) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum(1 for c in letters if pred(c)) / max(1, len(letters))  # type: ignore[operator]


def test_gbk_windows1251_latin1_pages_are_readable(data_dir: Path) -> None:
    pages = _pages(data_dir)

    def cjk(c: str) -> bool:
        return "\u4e00" <= c <= "\u9fff"

    def cyrillic(c: str) -> bool:
        return "\u0400" <= c <= "\u04ff"

    # declared gb2312 in the HTTP header (decoded as its superset GBK, as browsers do)
    gb = pages["http://0760.jxtdw.com/area/sanxiang/"][0]
    assert "中山英才网" in gb and _share(gb, cjk) > 0.8
    # no charset declared in HTTP; detected as GBK from the bytes / meta tag
    gbk = pages["http://041696.com/15477/list_6_4.html"][0]
    assert "耐磨板" in gbk and _share(gbk, cjk) > 0.5
    # windows-1251 (Russian)
    ru = pages["http://01spb.ru/company/"][0]
    assert "О компании" in ru and "пожарной безопасности" in ru and _share(ru, cyrillic) > 0.8
    # iso-8859-1 / windows-1252 (Swiss German): umlauts decoded, not mojibake
    de = pages["http://06.live-radsport.ch/tippspiel/stats_140_petzi.html"][0]
    accented = [c for c in de if unicodedata.category(c) == "Ll" and ord(c) > 0x7F]
    assert accented and not re.search("Ã[\u0080-\u00bf]", de)
    for url, (text, meta) in pages.items():
        assert "\ufffd\ufffd" not in text, url  # no replacement-character runs anywhere
        assert meta["content_type"] == "text/html"
        assert meta["date"].startswith("2020-08-08T"), url


def test_charset_rules() -> None:
    # a BOM wins; a header charset is used when the bytes decode with it; else detection
    assert charset_of(b"\xef\xbb\xbf<p>x</p>", "windows-1251") == "utf-8"
    cyr = "<p>Привет, мир! Это проверка кодировки страницы.</p>".encode("cp1251")
    assert charset_of(cyr, "windows-1251") == "cp1251"
    assert decode(cyr, "windows-1251") == "<p>Привет, мир! Это проверка кодировки страницы.</p>"
    utf = "<p>Grüße aus Köln, schöne Straße</p>".encode()
    assert decode(utf, "ascii") == "<p>Grüße aus Köln, schöne Straße</p>"  # a wrong header is overruled
    assert decode(b"<meta charset=iso-8859-1><p>caf\xe9</p>").endswith("café</p>")


def test_is_html() -> None:
    assert is_html("text/html; charset=utf-8", b"")
    assert is_html("application/xhtml+xml", b"")
    assert not is_html("application/pdf", b"<html>")
    assert not is_html("image/png", b"\x89PNG")
    assert is_html(None, b"  <!DOCTYPE html><html>")
    assert is_html("", b"<!-- x --><html lang=en>")
    assert not is_html(None, b"plain words")
