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


_OPTIONS = {
    "list_bullets": False,
    "alt_texts": False,
    "form_fields": False,
    "noscript": False,
    "comments": False,  # reader comments are not main text (+1.6 points on the trafilatura eval)
}
_TAG = re.compile(r"<[^>]*>")
_LINK = re.compile(r"<a\b[^>]*>(.*?)</a>", re.S)
_SPACES = re.compile(r"\s+")
_HEADING = re.compile(r"\s*<h[1-6]\b")
_OPENS = {"<p>": "</p>", "<pre>": "</pre>"}  # blocks that may span lines (<br>, preformatted text)

Kind = Literal["good", "near", "short", "bad"]


@dataclass
class Block:
    """One paragraph, heading or list item of the minimal-HTML rendering of a page."""

    text: str
    chars: int  # visible characters, white space runs counted once
    linked: int  # of which inside links
    heading: bool
    para: bool  # a blank line before it in the rendering (a new paragraph, not the next line)


class Boilerplate:
    """Keeps the blocks of a page that read as text, by length, link share and neighbours.

    A block whose text is more than ``max_link_share`` links is boilerplate; one of ``long`` or more
    characters is text; ``near`` or more is near-text, anything shorter is short. Short blocks take
    their neighbours' side (text only between text, or next to text and near-text); near-text is kept
    unless boilerplate is on both sides; a heading is kept when text follows it. Neighbours are the
    nearest blocks that are not short (and for short blocks, first not near-text either); past either
    end of the page counts as boilerplate.
    """

    long: ClassVar[int] = 120
    near: ClassVar[int] = 50
    max_link_share: ClassVar[float] = 0.5
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
        "[id*=comment]",
        "[class*=caption]",
        "[class*=author]",
        "[class*=copyright]",
        "[class*=disclaimer]",
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
            text = htmllib.unescape(_TAG.sub("", line)).replace("\u00a0", " ")  # no-break spaces as spaces
            chars = len(_SPACES.sub(" ", text).strip())
            if chars:
                linked = sum(len(_SPACES.sub(" ", htmllib.unescape(_TAG.sub("", a))).strip()) for a in _LINK.findall(line))
                out.append(Block(text.strip("\n").rstrip(), chars, linked, _HEADING.match(line) is not None, para))
                para = False
        return out

    @classmethod
    def judge(cls, blocks: list[Block]) -> list[bool]:
        """Whether each block is main text."""
        first: list[Kind] = []
        for b in blocks:
            if b.linked > cls.max_link_share * b.chars:
                first.append("bad")
            elif b.chars >= cls.long:
                first.append("good")
            elif b.chars >= cls.near:
                first.append("near")
            else:
                first.append("short")
        n = len(first)
        # nearest non-short neighbour on each side, and nearest that is neither short nor near
        prev_any: list[Kind] = ["bad"] * n
        prev_gb: list[Kind] = ["bad"] * n
        next_any: list[Kind] = ["bad"] * n
        next_gb: list[Kind] = ["bad"] * n
        a: Kind = "bad"
        g: Kind = "bad"
        for i in range(n):
            prev_any[i], prev_gb[i] = a, g
            if first[i] != "short":
                a = first[i]
                if first[i] != "near":
                    g = first[i]
        a = g = "bad"
        for i in range(n - 1, -1, -1):
            next_any[i], next_gb[i] = a, g
            if first[i] != "short":
                a = first[i]
                if first[i] != "near":
                    g = first[i]
        keep = []
        for i, kind in enumerate(first):
            if kind == "good":
                keep.append(True)
            elif kind == "bad":
                keep.append(False)
            elif kind == "near":
                keep.append(not (prev_gb[i] == next_gb[i] == "bad"))
            else:
                p, q = prev_gb[i], next_gb[i]
                if p == q:
                    ok = p == "good"
                else:  # text on one side, boilerplate on the other: near-text next to it decides
                    ok = "near" in (prev_any[i] if p == "bad" else p, next_any[i] if q == "bad" else q)
                keep.append(ok or (blocks[i].heading and q == "good"))
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
        markup = extract_plain_text(
            tree,
            preserve_formatting="minimal_html",
            main_content=main_content,
            links=True,
            skip_elements=list(skip) or None,
            **_OPTIONS,
        )
        blocks = cls.blocks(markup)
        return [b for b, keep in zip(blocks, cls.judge(blocks), strict=True) if keep]


def html_to_text(html: str, main_content: bool = True) -> str:
    """The readable (main) text of a page, paragraphs separated by blank lines.

    ``main_content=False`` gives all visible text (resiliparse's plain rendering, nothing judged).
    """
    tree = HTMLTree.parse(html)
    if main_content:
        return Boilerplate.main_text(tree)
    text = extract_plain_text(tree, preserve_formatting=True, main_content=False, links=False, **_OPTIONS)
    return _BLANK_RUNS.sub("\n\n", text).strip()


def extract(body: bytes, declared_charset: str | None = None, main_content: bool = True) -> str:
    """Raw HTML bytes -> main text."""
    return html_to_text(decode(body, declared_charset), main_content)
