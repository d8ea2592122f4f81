"""Real text for the tokenizer tests: several languages, docs, code, whitespace runs, emoji."""

from __future__ import annotations

import gzip
import tarfile
import zipfile
from functools import lru_cache
from pathlib import Path

UDHR_LATIN1 = ["English-Latin1", "French_Francais-Latin1", "German_Deutsch-Latin1"]

SYNTHETIC = [
    "emoji 😀😃😄 👩‍👩‍👧‍👦 🇫🇷🇩🇪 flags and ZWJ sequences ✊🏽",
    "tabs\t\t\tand    spaces      and\n\n\n\nnewlines \r\n\r\n end   ",
    " " * 300 + "x" + "\n" * 200 + "\t" * 50,
    "numbers 1234567890 3.14159 1,000,000 ٣٤٥ ४५६ ①②③",
    "it's they're we'll I'd you've He'S SHE'LL",
    "mixed CamelCaseWords and snake_case_words, URLs https://example.com/a/b?c=d&e=f#g",
    "combining: e\u0301 a\u0300 n\u0303 zalgo t\u0336\u0321e\u0337x\u0338t",
    "zero\u200bwidth\u200cjoin\u200dand\ufeffbom \u00a0nbsp \u2028ls \u2029ps \x0bvt \x0cff \x85nel",
    "<|endoftext|> a literal special token in text <|endoftext|><|endoftext|>",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!!!!!!!!",
    "",
]


def _cut(text: str, n: int) -> str:
    return text[:n]


@lru_cache(maxsize=1)
def real_texts(data_dir: Path, per_source: int = 120_000) -> tuple[str, ...]:
    """About 2 MB of text, one string per document, from every kind of source in the shared data."""
    ref = data_dir / "reference"
    out: list[str] = []
    for p in sorted((ref / "books").glob("*.txt")):
        out.extend(_cut(p.read_text(encoding="utf-8"), per_source).split("\n\n"))
    with zipfile.ZipFile(ref / "nltk" / "udhr.zip") as z:
        for name in sorted(z.namelist()):
            if name.endswith("-UTF8"):  # ~100 languages and scripts
                out.append(_cut(z.read(name).decode("utf-8", "ignore"), 4000))
        for name in UDHR_LATIN1:
            out.append(z.read(f"udhr/{name}").decode("latin-1"))
    with zipfile.ZipFile(ref / "nltk" / "webtext.zip") as z:
        names = [n for n in z.namelist() if n.endswith(".txt")]
        out.append(_cut(z.read(names[0]).decode("latin-1"), per_source))
    with tarfile.open(ref / "python-3.11-docs.rst.tar.gz") as t:
        n = 0
        for m in t:
            if m.isfile() and m.name.endswith(".rst.txt") and n < 12:
                f = t.extractfile(m)
                assert f is not None
                out.append(_cut(f.read().decode("utf-8"), per_source // 4))
                n += 1
    with gzip.open(ref / "jargon.txt.gz", "rt", encoding="latin-1") as f:
        out.append(f.read(per_source))
    root = Path(__file__).resolve().parents[1]
    for p in sorted((root / "crates" / "llmpipe-bpe" / "src").glob("*.rs"))[:4]:
        out.append(p.read_text(encoding="utf-8"))
    out.append((root / "python" / "llmpipe" / "tokenizer.py").read_text(encoding="utf-8"))
    out.extend(SYNTHETIC)
    return tuple(out)


def write_corpus(path: Path, texts: tuple[str, ...] | list[str]) -> Path:
    path.write_text("\n".join(texts), encoding="utf-8")
    return path
