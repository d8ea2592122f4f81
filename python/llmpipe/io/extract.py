"""HTML -> main text: charset detection and decoding, resiliparse's parse, then a boilerplate filter.

Main text is found in two steps. resiliparse drops the page's obvious chrome (navigation, headers,
footers, sidebars, hidden and comment sections) and writes what is left as minimal HTML, one block or
list item a line, links marked. ``Boilerplate`` then judges each block on its length and the share of
its text inside links, and settles the short and middling ones by their neighbours (the context rules
of jusText, Pomikalek 2011, without its per-language stop lists): a long block with few links is
text; a link list, a short label between boilerplate ("Mehr zum Thema", "Share", a byline, a
related-articles teaser) is not. A page where resiliparse's main-content pass leaves almost no text
is judged again on all its visible text. The cost stays linear in the page: one parse, at most two
serialisations, one pass over the blocks.

Decoding follows the web's order of evidence, with one exception: a byte-order mark; then UTF-8 if
the bytes are valid UTF-8 (a page whose header says iso-8859-1 but whose bytes are UTF-8 is, in
practice, UTF-8: this check costs one strict decode and saves a lot of mojibake); then the charset the
HTTP header declares (if the bytes decode with it), then the page's ``<meta charset>``, then
statistical detection (uchardet through resiliparse). Names are mapped to their WHATWG equivalents, so
a page labelled ``gb2312`` is decoded as GBK and ``iso-8859-1`` as windows-1252, as browsers do.
"""

from __future__ import annotations

import codecs
import html as htmllib
import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding, map_encoding_to_html5
from resiliparse.parse.html import HTMLTree

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", "application/xml+xhtml"})
_HTML_SNIFF = re.compile(rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_BLANK_RUNS = re.compile(r"\n[ \t\u00a0]*(?:\n[ \t\u00a0]*)+")


def is_html(content_type: str | None, body: bytes) -> bool:
    """True for an HTML media type, or (when none is declared) for a body that starts like HTML."""
    if content_type:
        media = content_type.split(";", 1)[0].strip().lower()
        if media in HTML_TYPES:
            return True
        if media not in ("", "application/octet-stream", "unknown/unknown", "text/plain"):
            return False
    return _HTML_SNIFF.match(body[:1024]) is not None


def charset_of(body: bytes, declared: str | None = None) -> str:
    """The WHATWG name of the encoding to decode ``body`` with."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name
    if _decodes(body, "utf-8"):
        return "utf-8"
    if declared:
        mapped = map_encoding_to_html5(declared.strip().strip("\"'"))
        if mapped and _decodes(body, mapped):
            return mapped
    return detect_encoding(body, from_html_meta=True) or "utf-8"


def _decodes(body: bytes, name: str) -> bool:
    try:
        body.decode(name)
    except (UnicodeDecodeError, LookupError):
        return False
    return True


def decode(body: bytes, declared: str | None = None) -> str:
    """Bytes of a web page as text; never raises on bad bytes (falls back, then replaces)."""
    if not body.startswith(_BOMS[1][0]) and not body.startswith(_BOMS[2][0]):
        try:
            return body.decode("utf-8").removeprefix("\ufeff")  # the common case, decoded once
        except UnicodeDecodeError:
            pass
    return bytes_to_str(body, charset_of(body, declared), errors="replace", strip_bom=True)


def _render(tree: HTMLTree, markup: bool, main_content: bool, skip: tuple[str, ...] = ()) -> str:
    """resiliparse's rendering of a page: plain text, or minimal HTML with the links marked."""
    return extract_plain_text(
        tree,
        preserve_formatting="minimal_html" if markup else True,
        main_content=main_content,
        links=markup,
        skip_elements=list(skip) or None,
        list_bullets=False,
        alt_texts=False,
        form_fields=False,
        noscript=False,
        comments=False,  # reader comments are not main text (+1.6 points on the trafilatura eval)
    )


_TAG = re.compile(r"<[^>]*>")
# a link's text: up to its </a>, never past the next <a (linear time even when no </a> follows)
_LINK = re.compile(r"<a\b[^>]*>([^<]*(?:<(?!/?a\b)[^<]*)*)</a>")
_SPACES = re.compile(r"\s+")
_WIDE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_OPENS = {"<p>": "</p>", "<pre>": "</pre>"}  # blocks that may span lines (<br>, preformatted text)


def _length(text: str) -> int:
    """Visible length: white space runs count once, a CJK character three (it is about a word)."""
    flat = _SPACES.sub(" ", text).strip()
    return len(flat) + 2 * len(_WIDE.findall(flat))


Kind = Literal["good", "near", "short", "bad"]


@dataclass
class Block:
    """One paragraph, heading, list item or table of the minimal-HTML rendering of a page."""

    text: str
    chars: int  # visible length (``_length``)
    linked: int  # of which inside links
    para: bool  # a blank line before it in the rendering (a new paragraph, not the next line)


class Boilerplate:
    """Keeps the blocks of a page that read as text, by length, link share and neighbours.

    A block whose text is more than ``max_link_share`` links (``max_link_share_long`` for a long one)
    is boilerplate; else one of ``long`` or more characters is text; ``near`` or more is near-text, anything shorter is short. A short block
    (a heading, a label, a caption) is kept only between text; near-text is kept unless boilerplate is
    on both sides. The neighbours are the nearest blocks on each side that are text or boilerplate
    (short and near-text ones are passed over); past either end of the page counts as boilerplate.
    """

    long: ClassVar[int] = 120
    near: ClassVar[int] = 50
    max_link_share: ClassVar[float] = 0.35
    max_link_share_long: ClassVar[float] = 0.8  # prose with many links (an encyclopedia's) is still text
    min_main_chars: ClassVar[int] = 250  # below this, the page is judged again on all visible text
    # containers skipped before judging: page and article footers, asides, related-content boxes,
    # comment threads, image captions, author boxes, copyright lines (the names sites give them)
    skip: ClassVar[tuple[str, ...]] = (
        "aside",
        "footer",
        "[class*=footer]",
        "[id*=footer]",
        "[class*=related]",
        "[id*=related]",
        "[class*=caption]",
        "[class*=author]",
        "[class*=copyright]",
        "[class*=disclaimer]",
        "[class*=newsletter]",
        "[id*=newsletter]",
    )

    @staticmethod
    def blocks(markup: str) -> list[Block]:
        """The blocks of resiliparse's ``minimal_html`` output (links marked), in page order."""
        out: list[Block] = []
        lines = markup.split("\n")
        i, para = 0, True
        while i < len(lines):
            line = lines[i]
            i += 1
            stripped = line.strip()
            if not stripped:
                para = True
                continue
            close = next((c for o, c in _OPENS.items() if stripped.startswith(o)), None)
            if close is not None and close not in line:  # a <p> or <pre> spanning lines is one block
                parts = [line]
                while i < len(lines):
                    parts.append(lines[i])
                    i += 1
                    if close in lines[i - 1]:
                        break
                line = "\n".join(parts)
            elif "\t" in line:  # resiliparse separates table cells by tabs: a table is one block
                parts = [line]
                while i < len(lines) and "\t" in lines[i]:
                    parts.append(lines[i])
                    i += 1
                line = "\n".join(parts)
            text = htmllib.unescape(_TAG.sub("", line)).replace("\u00a0", " ")  # no-break spaces as spaces
            chars = _length(text)
            if chars:
                linked = sum(_length(htmllib.unescape(_TAG.sub("", a))) for a in _LINK.findall(line))
                out.append(Block(text.strip("\n").rstrip(), chars, linked, para))
                para = False
        return out

    @classmethod
    def judge(cls, blocks: list[Block]) -> list[bool]:
        """Whether each block is main text."""
        first: list[Kind] = []
        for b in blocks:
            if b.linked > (cls.max_link_share if b.chars < cls.long else cls.max_link_share_long) * b.chars:
                first.append("bad")
            elif b.chars >= cls.long:
                first.append("good")
            elif b.chars >= cls.near:
                first.append("near")
            else:
                first.append("short")
        n = len(first)
        # the nearest block on each side that is neither short nor near-text ("bad" past the ends)
        before: list[Kind] = ["bad"] * n
        after: list[Kind] = ["bad"] * n
        side: Kind = "bad"
        for i in range(n):
            before[i] = side
            if first[i] in ("good", "bad"):
                side = first[i]
        side = "bad"
        for i in range(n - 1, -1, -1):
            after[i] = side
            if first[i] in ("good", "bad"):
                side = first[i]
        keep = []
        for i, kind in enumerate(first):
            if kind == "near":
                keep.append(not (before[i] == after[i] == "bad"))
            elif kind == "short":
                keep.append(before[i] == after[i] == "good")
            else:
                keep.append(kind == "good")
        return keep

    @classmethod
    def main_text(cls, tree: HTMLTree) -> str:
        """The main text of a parsed page, paragraphs separated by blank lines."""
        kept = cls._kept(tree, True, cls.skip)
        if sum(b.chars for b in kept) < cls.min_main_chars:
            # resiliparse's main-content pass can drop the article itself: judge all visible text
            every = cls._kept(tree, False, ())
            if sum(b.chars for b in every) > 1.5 * sum(b.chars for b in kept):
                kept = every
        return "".join(("\n\n" if b.para else "\n") + b.text for b in kept).strip()

    @classmethod
    def _kept(cls, tree: HTMLTree, main_content: bool, skip: tuple[str, ...]) -> list[Block]:
        blocks = cls.blocks(_render(tree, True, main_content, skip))
        return [b for b, keep in zip(blocks, cls.judge(blocks), strict=True) if keep]


def html_to_text(html: str, main_content: bool = True) -> str:
    """The readable (main) text of a page, paragraphs separated by blank lines.

    ``main_content=False`` gives all visible text (resiliparse's plain rendering, nothing judged).
    """
    tree = HTMLTree.parse(html)
    if main_content:
        return Boilerplate.main_text(tree)
    return _BLANK_RUNS.sub("\n\n", _render(tree, False, False)).strip()


def extract(body: bytes, declared_charset: str | None = None, main_content: bool = True) -> str:
    """Raw HTML bytes -> main text."""
    return html_to_text(decode(body, declared_charset), main_content)
