"""Real documents with planted near duplicates, and an independent word-shingle oracle.

Base documents are movie reviews from nltk's movie_reviews corpus (real text, ~700 words each);
variants apply known edits: word substitutions, deletions, insertions at a rate, added boilerplate,
reordered paragraphs. The oracle computes word 5-gram sets in plain Python, with the normalisation
documented for near dedup (NFC, lower case, punctuation removed, split on whitespace).
"""

from __future__ import annotations

import random
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

_PUNCT = re.compile(r"[!-/:-@\[-`{-~\u2000-\u206f\u3000-\u303f\uff01-\uff0f¡¿«»]")

BOILERPLATE = (
    "Share this review on Facebook Twitter and email. Sign up for our newsletter to get the best "
    "reviews every week. Copyright 2019 Movie Review Network. All rights reserved. Privacy policy. "
    "Terms of use. Advertise with us. Contact the editors."
)


def shingle_set(text: str, n: int = 5) -> frozenset[str]:
    words = _PUNCT.sub("", unicodedata.normalize("NFC", text).lower()).split()
    if not words:
        return frozenset()
    if len(words) < n:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def movie_reviews(data_dir: Path, limit: int) -> list[str]:
    """Real reviews, one per file, with a paragraph break every 6 lines."""
    docs = []
    with zipfile.ZipFile(data_dir / "reference" / "nltk" / "movie_reviews.zip") as z:
        names = sorted(x for x in z.namelist() if x.endswith(".txt"))
        for name in names[:limit]:
            lines = z.read(name).decode("utf-8").split("\n")
            paras = ["\n".join(lines[i : i + 6]) for i in range(0, len(lines), 6)]
            docs.append("\n\n".join(p for p in paras if p.strip()))
    return docs


def mutate(text: str, kind: str, rate: float, rng: random.Random, vocab: list[str]) -> str:
    if kind == "boilerplate":
        return f"{BOILERPLATE}\n\n{text}\n\n{BOILERPLATE}"
    if kind == "reorder":
        paras = text.split("\n\n")
        rng.shuffle(paras)
        return "\n\n".join(paras)
    out: list[str] = []
    for w in text.split(" "):
        r = rng.random()
        if kind == "substitute" and r < rate:
            out.append(rng.choice(vocab))
        elif kind == "delete" and r < rate:
            continue
        elif kind == "insert" and r < rate:
            out.extend([w, rng.choice(vocab)])
        else:
            out.append(w)
    return " ".join(out)


KINDS = [("substitute", r) for r in (0.005, 0.01, 0.02, 0.05, 0.1)]
KINDS += [("delete", r) for r in (0.005, 0.01, 0.02, 0.05, 0.1)]
KINDS += [("insert", r) for r in (0.005, 0.01, 0.02, 0.05, 0.1)]
KINDS += [("boilerplate", 0.0), ("reorder", 0.0)]


@dataclass
class Corpus:
    ids: list[str]
    texts: list[str]
    planted: list[tuple[int, int, str]]  # (base index, variant index, edit)


def planted_corpus(data_dir: Path, n_base: int = 300, n_plain: int = 200, seed: int = 0) -> Corpus:
    """Bases, one variant each (edits cycle through KINDS), and untouched real documents."""
    rng = random.Random(seed)
    reviews = movie_reviews(data_dir, n_base + n_plain)
    vocab = sorted({w for d in reviews[:50] for w in d.split() if w.isalpha()})
    texts = list(reviews)
    planted = []
    for b in range(n_base):
        kind, rate = KINDS[b % len(KINDS)]
        texts.append(mutate(reviews[b], kind, rate, rng, vocab))
        planted.append((b, len(texts) - 1, f"{kind}@{rate}"))
    ids = [f"doc-{i:05d}" for i in range(len(texts))]
    return Corpus(ids, texts, planted)
