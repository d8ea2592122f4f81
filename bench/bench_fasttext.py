"""fastText prediction: llmpipe's Rust predictor vs the ``fasttext`` package, same model, same texts.

Models: language ID trained here by the ``fasttext`` package on the UDHR translations of nltk (every
readable file, one label per file), shaped like lid.176 (dim 16, char n-grams 2-4, hierarchical
softmax) plus a softmax model with word bigrams and its quantized .ftz. Texts: every document of
../shared/data/web/*.jsonl[.gz], newlines as spaces (the package rejects them), repeated to ~10 MB.
Output checked identical in the run (labels equal, probabilities within 1e-5). Then the language
stage (annotate: detect + columns) with backend whatlang vs fasttext on the same batch.

One core (``RAYON_NUM_THREADS=1``; the package predicts on the calling thread), CPU seconds of this
process, best of 3.

    python bench/bench_fasttext.py
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # per core

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ENCODINGS = {"UTF8": "utf-8", "Latin1": "latin-1"}


def web_texts(target_bytes: float = 10e6) -> list[str]:
    out: list[str] = []
    for path in sorted((DATA / "web").glob("*.jsonl*")):
        opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            out += [" ".join(json.loads(line)["text"].split()) for line in f if line.strip()]
    size = sum(len(t.encode()) for t in out)
    return out * max(1, round(target_bytes / size))


def udhr_training_file(path: Path) -> int:
    lines = []
    with zipfile.ZipFile(DATA / "reference" / "nltk" / "udhr.zip") as z:
        for name in z.namelist():
            enc = ENCODINGS.get(name.rsplit("-", 1)[-1])
            if enc is None:
                continue
            label = name.split("/")[-1].rsplit("-", 1)[0].replace(" ", "_")
            text = z.read(name).decode(enc, errors="ignore")
            lines += [f"__label__{label} {' '.join(p.split())}" for p in text.split("\n") if p.strip()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len({line.split()[0] for line in lines})


def best(fn: Callable[[], Any], rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def check_same(oracle: Any, ours: Any, texts: list[str]) -> None:
    want_l, want_p = oracle.predict(texts, k=1)
    got_l, got_p = ours.predict(texts, k=1)
    bad = sum(
        list(wl) != gl or abs(float(wp[0]) - gp[0]) > 1e-5
        for wl, wp, gl, gp in zip(want_l, want_p, got_l, got_p, strict=True)
    )
    if bad:
        raise SystemExit(f"{bad} of {len(texts)} predictions differ from the fasttext package")


def main() -> None:
    import fasttext
    import pyarrow as pa
    from llmpipe.curate.stages.language import LanguageFilter
    from llmpipe.quality import FastTextModel

    texts = web_texts()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(texts):,} texts, {mb:.1f} MB; one core, CPU s best of 3\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp) / "train.txt"
        n_labels = udhr_training_file(train)
        # thread=11: the package fills its matrix in 10 per-thread blocks and leaves the rest unset below 11 (tests/fasttext_oracle.py)
        common = dict(input=str(train), epoch=5, lr=0.5, thread=11, verbose=0, bucket=200_000)
        models = {
            "lid-like (hs, dim 16, char 2-4)": fasttext.train_supervised(
                dim=16, loss="hs", minn=2, maxn=4, **common
            ),
            "softmax, dim 32, word bigrams, char 2-4": fasttext.train_supervised(
                dim=32, loss="softmax", wordNgrams=2, minn=2, maxn=4, **common
            ),
        }
        q = fasttext.train_supervised(dim=32, loss="softmax", wordNgrams=2, minn=2, maxn=4, **common)
        q.quantize(input=str(train), qnorm=True, retrain=False, cutoff=100_000)
        models["the same, quantized .ftz (qnorm, cutoff 100k)"] = q
        paths = {}
        for i, (name, m) in enumerate(models.items()):
            p = Path(tmp) / f"m{i}.{'ftz' if 'ftz' in name else 'bin'}"
            m.save_model(str(p))
            paths[name] = p
            ours = FastTextModel.load(p)
            check_same(m, ours, texts[: len(texts) // 4])
            t_peer = best(lambda m=m: m.predict(texts, k=1))
            t_ours = best(lambda o=ours: o.predict(texts, k=1))
            rows.append((f"predict k=1, {name}, {n_labels} labels", mb / t_ours, mb / t_peer))

        batch = pa.record_batch({"text": pa.array(texts, pa.large_string())})
        whatlang = LanguageFilter(LanguageFilter.Config(languages=[]))
        ft = LanguageFilter(
            LanguageFilter.Config(backend="fasttext", model=str(paths[next(iter(paths))]), languages=[])
        )
        t_w = best(lambda: whatlang.annotate(batch))
        t_f = best(lambda: ft.annotate(batch))
    print("| | llmpipe MB/s | peer MB/s | ratio |")
    print("|---|---:|---:|---:|")
    for name, ours_mbs, peer_mbs in rows:
        print(f"| {name} | {ours_mbs:.1f} | {peer_mbs:.1f} | {ours_mbs / peer_mbs:.2f}x |")
    print(
        f"| language stage: fasttext backend (lid-like model) vs whatlang | {mb / t_f:.1f} | "
        f"{mb / t_w:.1f} (whatlang) | {t_w / t_f:.2f}x |"
    )


if __name__ == "__main__":
    main()
