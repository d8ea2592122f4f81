"""HTML -> main text: charset detection and decoding, resiliparse's parse, then a boilerplate filter.

Main text is found in three steps. ``mark_body`` marks the element that the page itself names as its
article body (``itemprop=articleBody``, a CMS's body class, a single ``<article>``), if there is one.
resiliparse drops the page's obvious chrome (navigation, headers, footers, sidebars, hidden and
comment sections, and ``Boilerplate.skip``) and writes what is left as minimal HTML, one block or list
item a line, links marked. ``BlockScorer`` then decides each block from ``features``: its length and
the share of its text inside links, whether it is a heading, how it ends, its digits and punctuation,
its neighbours (the kinds of jusText's context rules, Pomikalek 2011, without per-language stop
lists), its place on the page and whether it lies in the marked body; the scorer is a small
gradient-boosted tree ensemble (shipped as JSON data) trained on four fifths of trafilatura's
evaluation pages. A page where resiliparse's main-content pass leaves almost no text is judged again
on all its visible text, where a block is kept only if the context rules keep it too; a page with not
one block that reads as text (labels, menu words, numbers) has no main text. The cost stays linear
in the page: one parse, one selector query, at most two serialisations, one pass over the blocks and
a few array operations per tree level.

Decoding follows the web's order of evidence, with one exception: a byte-order mark; then UTF-8 if
the bytes are valid UTF-8 (a page whose header says iso-8859-1 but whose bytes are UTF-8 is, in
practice, UTF-8: this check costs one strict decode and saves a lot of mojibake); then the charset the
HTTP header declares (if the bytes decode with it), then the page's ``<meta charset>``, then
statistical detection (uchardet through resiliparse). Names are mapped to their WHATWG equivalents, so
a page labelled ``gb2312`` is decoded as GBK and ``iso-8859-1`` as windows-1252, as browsers do.
"""

from __future__ import annotations

import codecs
import functools
import html as htmllib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding, map_encoding_to_html5
from resiliparse.parse.html import DOMNode, HTMLTree

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
_LEVELS = frozenset("123456")


def _length(text: str) -> int:
    """Visible length: white space runs count once, a CJK character three (it is about a word)."""
    words = text.split()
    if not words:
        return 0
    n = sum(map(len, words)) + len(words) - 1
    return n if text.isascii() else n + 2 * len(_WIDE.findall(text))


Kind = Literal["good", "near", "short", "bad"]


@dataclass
class Block:
    """One paragraph, heading, list item or table of the minimal-HTML rendering of a page."""

    text: str
    chars: int  # visible length (``_length``)
    linked: int  # of which inside links
    para: bool  # a blank line before it in the rendering (a new paragraph, not the next line)
    heading: bool = False  # an <h1>..<h6>
    in_body: bool = False  # between the marks of ``mark_body``


_ENDS = frozenset('.!?")\u201c\u201d\u00bb\u2026')  # a block that ends like a sentence
_DIGITS = "0123456789"
_PUNCT = ".!?;,\u3001\u3002\uff0c"  # sentence and clause marks, Latin and CJK
# elements that hold an article's body, by the names sites and CMSs give them (trafilatura's BODY_XPATH):
# itemprop articleBody, then these class names (whole class tokens), then an <article> element
_BODY_CLASSES = ("article-body", "entry-content", "post-content")  # the common ones (rarer names cost a pass)
_KIND_CODE = {"good": 0, "near": 1, "short": 2, "bad": 3}

FEATURES = (
    "log_chars",
    "link_share",
    "heading",
    "good",
    "near",
    "short",
    "judged",
    "before_good",
    "after_good",
    "prev_good",
    "next_good",
    "prev_bad",
    "next_bad",
    "position",
    "before_first_good",
    "after_last_good",
    "page_share",
    "sentence_end",
    "colon_end",
    "digit_share",
    "paragraph",
    "multiline",
    "in_body",
    "out_of_body",
    "punctuation",
    "table",
    "prev_log_chars",
    "next_log_chars",
    "prev_link_share",
    "next_link_share",
    "good_before_share",
)


_BODY_SELECTOR = ", ".join(("[itemprop=articleBody]", *(f".{c}" for c in _BODY_CLASSES), "article"))
_OPEN, _CLOSE = "\u2060llmpipe:body\u2060", "\u2060llmpipe:/body\u2060"  # word joiners: invisible


def mark_body(tree: HTMLTree) -> bool:
    """Marks the start and end of the page's article body in ``tree``, if one element is marked as such.

    The first kind of mark found decides (an ``itemprop=articleBody``, each of ``_BODY_CLASSES`` in
    turn, an ``<article>``): one element so marked is the body (a paragraph holding ``_OPEN`` is put
    first in it, one holding ``_CLOSE`` last; ``Boilerplate.blocks`` takes them out again and flags
    the blocks between them); several mean there is none. One selector query finds them all.
    """
    root = tree.body
    if root is None:
        return False
    found = root.query_selector_all(_BODY_SELECTOR)  # one pass over the page for every kind of mark
    if len(found) > 8:  # a listing page with many teasers, most of them <article>s: the other marks alone
        found = root.query_selector_all(_BODY_SELECTOR.removesuffix(", article"))
        if not len(found):
            return False  # many <article>s and nothing else
    kinds: list[list[DOMNode]] = [[] for _ in range(len(_BODY_CLASSES) + 2)]
    for node in found:
        if node.getattr("itemprop") == "articleBody":
            kinds[0].append(node)
        classes = node.class_list
        for k, name in enumerate(_BODY_CLASSES):
            if name in classes:
                kinds[k + 1].append(node)
        if node.tag == "article":
            kinds[-1].append(node)
    for marked in kinds:
        if len(marked) > 1:
            return False
        if marked:
            body = marked[0]
            first, last = tree.create_element("p"), tree.create_element("p")
            opening, closing = tree.create_text_node(_OPEN), tree.create_text_node(_CLOSE)
            if first is None or last is None or opening is None or closing is None:
                return False
            first.append_child(opening)
            last.append_child(closing)
            if body.first_child is None:
                body.append_child(first)
            else:
                body.insert_before(first, body.first_child)
            body.append_child(last)
            return True
    return False


def features(blocks: list[Block]) -> np.ndarray:
    """One row of ``FEATURES`` per block: its own length, links and shape, its neighbours, its place."""
    n = len(blocks)
    if not n:
        return np.empty((0, len(FEATURES)), dtype=np.float64)
    kinds, before, after = Boilerplate.context(blocks)
    chars = np.array([b.chars for b in blocks], dtype=np.float64)
    logs = np.log1p(chars)
    shares = np.array([b.linked for b in blocks], dtype=np.float64) / chars
    kind = np.array([_KIND_CODE[k] for k in kinds])
    good, bad = kind == 0, kind == 3
    idx = np.flatnonzero(good)
    first_good, last_good = (idx[0], idx[-1]) if len(idx) else (n, -1)
    good_chars = np.where(good, chars, 0.0)
    texts = [b.text for b in blocks]
    pad_false = np.zeros(1, dtype=bool)
    pad_true = np.ones(1, dtype=bool)
    x = np.empty((n, len(FEATURES)), dtype=np.float64)
    x[:, 0] = logs
    x[:, 1] = shares
    x[:, 2] = [b.heading for b in blocks]
    x[:, 3] = good
    x[:, 4] = kind == 1
    x[:, 5] = kind == 2
    x[:, 6] = Boilerplate._judged(kinds, before, after)
    x[:, 7] = [k == "good" for k in before]
    x[:, 8] = [k == "good" for k in after]
    x[:, 9] = np.concatenate((pad_false, good[:-1]))
    x[:, 10] = np.concatenate((good[1:], pad_false))
    x[:, 11] = np.concatenate((pad_true, bad[:-1]))
    x[:, 12] = np.concatenate((bad[1:], pad_true))
    x[:, 13] = np.arange(n) / max(1, n - 1)
    x[:, 14] = np.arange(n) < first_good
    x[:, 15] = np.arange(n) > last_good
    x[:, 16] = chars / chars.sum()
    last = [t.rstrip()[-1:] for t in texts]
    x[:, 17] = [c in _ENDS for c in last]
    x[:, 18] = [c == ":" for c in last]
    x[:, 19] = np.array([sum(map(t.count, _DIGITS)) for t in texts]) / chars
    x[:, 20] = [b.para for b in blocks]
    x[:, 21] = ["\n" in t for t in texts]
    body = [b.in_body for b in blocks]
    if any(body):  # the body's marks survived the rendering
        x[:, 22] = body
        x[:, 23] = np.logical_not(x[:, 22])
    else:
        x[:, 22] = x[:, 23] = 0.0
    x[:, 24] = np.minimum(5.0, 100 * np.array([sum(map(t.count, _PUNCT)) for t in texts]) / chars)
    x[:, 25] = ["\t" in t for t in texts]
    x[:, 26] = np.concatenate(([0.0], logs[:-1]))
    x[:, 27] = np.concatenate((logs[1:], [0.0]))
    x[:, 28] = np.concatenate(([1.0], shares[:-1]))
    x[:, 29] = np.concatenate((shares[1:], [1.0]))
    x[:, 30] = (np.cumsum(good_chars) - good_chars) / max(1.0, good_chars.sum())
    return x


class Boilerplate:
    """Splits a page into blocks and keeps those that read as text (``BlockScorer`` decides).

    The context rules below are features of the scorer (and, on the fallback over all visible text,
    a second condition): a block whose text is more than ``max_link_share`` links
    (``max_link_share_long`` for a long one) is boilerplate; else one of ``long`` or more characters is
    text; ``near`` or more is near-text, anything shorter is short. A short block (a heading, a label,
    a caption) is kept only between text; near-text is kept unless boilerplate is on both sides. The neighbours are the nearest blocks on each side that are text or boilerplate
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
        i, para, inside = 0, True, False
        while i < len(lines):
            line = lines[i]
            i += 1
            stripped = line.strip()
            if not stripped:
                para = True
                continue
            close = (
                "</p>" if stripped.startswith("<p>") else "</pre>" if stripped.startswith("<pre>") else None
            )
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
            leaves = False
            if "\u2060llmpipe:" in line:  # the marks of the article body (``mark_body``)
                inside = inside or _OPEN in line
                leaves = _CLOSE in line
                line = line.replace(_OPEN, "").replace(_CLOSE, "")
            text = htmllib.unescape(_TAG.sub("", line) if "<" in line else line).replace("\u00a0", " ")
            chars = _length(text)  # (no-break spaces count as spaces)
            if chars:
                linked = 0
                if "<a" in line:
                    linked = sum(_length(htmllib.unescape(_TAG.sub("", a))) for a in _LINK.findall(line))
                heading = stripped.startswith("<h") and stripped[2:3] in _LEVELS
                out.append(Block(text.strip("\n").rstrip(), chars, linked, para, heading, inside))
                para = False
            inside = inside and not leaves
        return out

    @classmethod
    def context(cls, blocks: list[Block]) -> tuple[list[Kind], list[Kind], list[Kind]]:
        """Each block's kind, and the kind of the nearest text or boilerplate block before and after it.

        Short and near-text blocks are passed over when looking for neighbours; past either end of the
        page counts as boilerplate.
        """
        kinds: list[Kind] = []
        for b in blocks:
            if b.linked > (cls.max_link_share if b.chars < cls.long else cls.max_link_share_long) * b.chars:
                kinds.append("bad")
            elif b.chars >= cls.long:
                kinds.append("good")
            elif b.chars >= cls.near:
                kinds.append("near")
            else:
                kinds.append("short")
        n = len(kinds)
        before: list[Kind] = ["bad"] * n
        after: list[Kind] = ["bad"] * n
        side: Kind = "bad"
        for i in range(n):
            before[i] = side
            if kinds[i] in ("good", "bad"):
                side = kinds[i]
        side = "bad"
        for i in range(n - 1, -1, -1):
            after[i] = side
            if kinds[i] in ("good", "bad"):
                side = kinds[i]
        return kinds, before, after

    @classmethod
    def judge(cls, blocks: list[Block]) -> list[bool]:
        """Whether each block is main text by the context rules alone (a feature of the scorer)."""
        kinds, before, after = cls.context(blocks)
        return cls._judged(kinds, before, after)

    @staticmethod
    def _judged(kinds: list[Kind], before: list[Kind], after: list[Kind]) -> list[bool]:
        keep = []
        for kind, b, a in zip(kinds, before, after, strict=True):
            if kind == "near":
                keep.append(not (b == a == "bad"))
            elif kind == "short":
                keep.append(b == a == "good")
            else:
                keep.append(kind == "good")
        return keep

    @classmethod
    def main_text(cls, tree: HTMLTree) -> str:
        """The main text of a parsed page, paragraphs separated by blank lines."""
        mark_body(tree)
        kept = cls._kept(tree, True, cls.skip, False)
        if sum(b.chars for b in kept) < cls.min_main_chars:
            # resiliparse's main-content pass can drop the article itself: judge all visible text, keeping
            # what both the scorer and the context rules keep (the scorer learnt from article pages; all of
            # a shop's or a listing's visible text is mostly menus, which the rules know)
            every = cls._kept(tree, False, (), True)
            if sum(b.chars for b in every) > 1.5 * sum(b.chars for b in kept):
                kept = every
        if not any(kind in ("good", "near") for kind in cls.context(kept)[0]):
            return ""  # labels, menu words, numbers: not one block that reads as text
        return "".join(("\n\n" if b.para else "\n") + b.text for b in kept).strip()

    @classmethod
    def _kept(cls, tree: HTMLTree, main_content: bool, skip: tuple[str, ...], strict: bool) -> list[Block]:
        blocks = cls.blocks(_render(tree, True, main_content, skip))
        if not blocks:
            return []
        keep = BlockScorer.shipped().keep(features(blocks))
        if strict:
            keep = [a and b for a, b in zip(keep, cls.judge(blocks), strict=True)]
        return [b for b, k in zip(blocks, keep, strict=True) if k]


class BlockScorer:
    """Gradient-boosted decision trees that say whether a block is main text, from its ``FEATURES``.

    The trees are data (``extract_scorer.json`` beside this module), written by
    ``bench/train_extract_scorer.py`` from scikit-learn's ``HistGradientBoostingClassifier`` trained on
    four fifths of trafilatura's evaluation pages (the fifth that ``bench/bench_extract_f1.py`` holds
    out was never used). Each tree is stored complete to its depth ``d``: the split feature and
    threshold of its ``2**d - 1`` inner nodes in breadth-first order (a value at or below the threshold
    goes left), then the values of its ``2**d`` leaves. A block is kept when the base score plus its
    leaves' values (the log-odds of main text) is above the file's threshold. All trees walk all blocks
    at once with numpy: a page costs ``d`` rounds of a few array operations.
    """

    def __init__(self, model: dict) -> None:
        if tuple(model["features"]) != FEATURES:
            raise ValueError("extract scorer: its feature list differs from this module's FEATURES")
        self.depth = int(model["depth"])
        inner, leaves = 2**self.depth - 1, 2**self.depth
        self.feature = np.asarray(model["feature"], dtype=np.intp).reshape(-1)
        self.threshold = np.asarray(model["threshold"], dtype=np.float64).reshape(-1)
        self.value = np.asarray(model["value"], dtype=np.float64).reshape(-1)
        trees = len(model["feature"])
        if self.feature.size != trees * inner or self.value.size != trees * leaves:
            raise ValueError("extract scorer: tree arrays do not match their depth")
        if self.feature.size and not 0 <= self.feature.min() <= self.feature.max() < len(FEATURES):
            raise ValueError("extract scorer: a split on a feature that does not exist")
        self._inner = (np.arange(trees) * inner)[:, None]
        self._leaves = (np.arange(trees) * leaves - inner)[:, None]
        self.base = float(model["base"])
        self.cut = float(model["threshold_log_odds"])

    @classmethod
    @functools.cache
    def shipped(cls) -> BlockScorer:
        return cls(json.loads((Path(__file__).parent / "extract_scorer.json").read_text(encoding="utf-8")))

    def score(self, x: np.ndarray) -> np.ndarray:
        """The log-odds of main text of each row of ``x`` (blocks x ``FEATURES``)."""
        flat = x.ravel()
        row = (np.arange(len(x)) * x.shape[1])[None, :]
        node = np.zeros((len(self._inner), len(x)), dtype=np.intp)
        for _ in range(self.depth):
            at = self._inner + node
            right = flat.take(row + self.feature.take(at)) > self.threshold.take(at)
            node = 2 * node + 1 + right
        return self.base + self.value.take(self._leaves + node).sum(axis=0)

    def keep(self, x: np.ndarray) -> list[bool]:
        return (self.score(x) > self.cut).tolist()


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
