"""The normalize stage's one-pass Rust cleaning equals the Arrow regex chain it replaced.

The oracle is that chain, written here with pyarrow.compute: NFC, ``\\r\\n?`` -> ``\\n``, control
characters removed, ``[ \\t]+\\n`` -> ``\\n``, ``\\n{3,}`` -> ``\\n\\n``, Unicode whitespace trimmed.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from llmpipe.curate.stages.normalize import Normalize


def arrow_chain(text: pa.Array, form: str) -> pa.Array:
    out = pc.utf8_normalize(text, form=form)
    out = pc.replace_substring_regex(out, pattern=r"\r\n?", replacement="\n")
    out = pc.replace_substring_regex(out, pattern=r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x{FEFF}]", replacement="")
    out = pc.replace_substring_regex(out, pattern=r"[ \t]+\n", replacement="\n")
    out = pc.replace_substring_regex(out, pattern=r"\n{3,}", replacement="\n\n")
    return pc.utf8_trim_whitespace(out)


def real_texts(data_dir: Path) -> list[str]:
    texts = []
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        texts += [json.loads(line)["text"] for line in f]
    for name in ("cc-en-head-0091.jsonl", "cc-en-head-0174.jsonl"):
        with open(data_dir / "web" / name, encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    return texts


def edge_texts() -> list[str]:
    """Every code point (but surrogates) alone, at the ends and inside text, and runs that mix the rules."""
    out = []
    for cp in list(range(0, 0x3100)) + [0xFEFF, 0xFFFD, 0x1F600, 0xE0001, 0x10FFFF]:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        out += [c, f"{c}a{c}", f"a {c}\nb", f"a\n{c}\n\n\nb{c} \n"]
    out += ["", " ", "\r", "\r\r\n\n", "a \t\r\n\t b", "x\n \n \n \ny", "e\u0301\u0327", "\u212b\u1e9b\u0323"]
    out += ["\n" * k + "a" + " \t" * k + "\r\n" * k + "b" for k in range(6)]
    return out


@pytest.mark.parametrize("form", ["NFC", "NFKC", "NFD", "NFKD"])
def test_rust_cleaning_equals_the_arrow_chain(data_dir: Path, form: str) -> None:
    texts = real_texts(data_dir) + edge_texts()
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(texts, typ)
        batch = pa.record_batch([arr, pa.array(range(len(texts)))], names=["text", "id"])
        m = Normalize(Normalize.Config(form=form)).map(batch)
        got, changed = m.batch, m.changed
        want = arrow_chain(arr, form)
        assert got.schema.field("text").type == typ
        assert got.column("id").to_pylist() == list(range(len(texts)))
        g, w = got.column("text").to_pylist(), want.to_pylist()
        bad = [(texts[i], g[i], w[i]) for i in range(len(texts)) if g[i] != w[i]]
        assert not bad, f"{len(bad)} differ, first: {bad[:3]!r}"
        assert changed == sum(a != b for a, b in zip(texts, w, strict=True))
        assert changed > 100  # the real texts do get cleaned


def test_sliced_and_empty_batches() -> None:
    arr = pa.array(["  a\r\n", "b \n\n\n\nc", "", " d "], pa.string())
    batch = pa.record_batch([arr], names=["text"]).slice(1, 2)
    m = Normalize(Normalize.Config()).map(batch)
    got, changed = m.batch, m.changed
    assert got.column("text").to_pylist() == ["b\n\nc", ""]
    assert changed == 1
    m = Normalize(Normalize.Config()).map(batch.slice(0, 0))
    empty, n = m.batch, m.changed
    assert empty.num_rows == 0 and n == 0


def test_word_counts_equal_python_split(data_dir: Path) -> None:
    """The funnel's word unit (one Rust call per batch) is exactly ``len(text.split())``."""
    from llmpipe.curate.stage import word_counts

    texts = real_texts(data_dir) + edge_texts() + ["".join(chr(c) for c in range(0x2000, 0x2100)) * 3]
    batch = pa.record_batch([pa.array(texts, pa.string())], names=["text"])
    assert word_counts(batch).tolist() == [len(t.split()) for t in texts]
