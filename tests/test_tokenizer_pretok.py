"""The hand-written pre-tokenizers of the built-in patterns against regex engines as oracles.

llmpipe splits text for the gpt2, cl100k and o200k patterns with scanners written in Rust
(crates/llmpipe-bpe/src/pretok.rs), not with a regex. Their pieces must be exactly the regex's:
checked against the `regex` package (the engine tiktoken's Python side documents its patterns
with; it has the possessive quantifiers cl100k uses) and against fancy-regex (the engine
tiktoken's Rust core uses, exposed here as `pre_tokenize_regex`), on all the real text of the
tokenizer tests and on thousands of generated adversarial strings with a fixed seed.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import regex
from llmpipe.tokenizer import Tokenizer
from tokenizer_texts import real_texts

PATTERNS = ["gpt2", "cl100k", "o200k"]

# Whitespace of every kind and CR/LF runs, digits of several scripts, letters of every case class
# (Lu, Ll, Lt, Lm, Lo), combining marks (Mn, Mc, Me), apostrophes and contractions in both cases
# (and U+017F, which `(?i:s)` matches), `/`, emoji, ZWJ and variation selectors. All characters
# are old enough to be classified the same by every Unicode version the engines use.
SNIPPETS = [
    " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000",
    "\u2028", "\u2029", "\u202f", "\u3000", "\u200b", "0", "7", "42", "12345", "٣", "४५६", "①", "Ⅻ", "½",
    "a", "s", "t", "d", "m", "l", "v", "e", "r", "A", "S", "T", "L", "V", "E", "R", "D", "M", "hello",
    "World", "HTML", "CamelCase", "\u017f", "\u212a", "É", "ß", "ǅ", "ǈ", "ʰ", "ー", "Σ", "σ", "ς", "Ж",
    "ж", "中文", "ب", "ש", "क", "\u093f", "\u0301", "\u0300", "\u20dd", "\ufe0f", "\u200d", "'", "’", "'s",
    "'S", "'t", "'re", "'RE", "'ve", "'Ve", "'m", "'ll", "'LL", "'lL", "'d", "'\u017f", "'x", "!", "?",
    ".", ",", "-", "_", "/", "//", "<|endoftext|>", "😀", "👩\u200d👩\u200d👧", "🇫🇷", "✊🏽", "𝔘", "𝟙",
]  # fmt: skip


def _adversarial(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(SNIPPETS) for _ in range(rng.randint(1, 24))) for _ in range(n)]


@pytest.fixture(scope="module", params=PATTERNS)
def tok(request: pytest.FixtureRequest) -> Tokenizer:
    return Tokenizer.train_from_texts(["pre-tokenizer test"], 300, pattern=request.param)


@pytest.fixture(scope="module")
def texts(data_dir: Path) -> list[str]:
    return list(real_texts(data_dir))


def _assert_same(tok: Tokenizer, compiled: regex.Pattern[str], text: str) -> None:
    ours = tok.pre_tokenize(text)
    oracle = compiled.findall(text)
    assert "".join(oracle) == text  # the built-in patterns leave no gaps
    assert ours == oracle, (text[:200], ours[:20], oracle[:20])
    assert ours == tok._core.pre_tokenize_regex(text)


def test_same_pieces_as_regex_on_real_text(tok: Tokenizer, texts: list[str]) -> None:
    """Every document of the tokenizer tests (books, ~100 UDHR languages, docs, code, emoji)."""
    compiled = regex.compile(tok.pattern)
    assert len(texts) > 100
    for t in texts:
        _assert_same(tok, compiled, t)
    # line by line, as training feeds the pre-tokenizer
    lines = [line for t in texts[::7] for line in t.splitlines(keepends=True)]
    for line in lines[:5000]:
        _assert_same(tok, compiled, line)


def test_same_pieces_as_regex_on_adversarial_strings(tok: Tokenizer) -> None:
    compiled = regex.compile(tok.pattern)
    for s in _adversarial(4000, seed=20261122):
        _assert_same(tok, compiled, s)


def test_pieces_differ_between_patterns() -> None:
    """The three scanners are really different (the cases where the patterns disagree)."""
    text = "HELLOworld it'S 12345 \n\n  x"
    pieces = {p: Tokenizer.train_from_texts(["x"], 300, pattern=p).pre_tokenize(text) for p in PATTERNS}
    assert pieces["gpt2"] == ["HELLOworld", " it", "'", "S", " 12345", " \n\n ", " x"]
    assert pieces["cl100k"] == ["HELLOworld", " it", "'S", " ", "123", "45", " \n\n", " ", " x"]
    assert pieces["o200k"] == ["HELLOworld", " it'S", " ", "123", "45", " \n\n", " ", " x"]
