"""Tokenizer benchmark: llmpipe vs tiktoken and HF tokenizers on the same vocabulary and text.

    python bench/bench_tokenizer.py [--quick] [--train-mb 100] [--threads 2]

1. Builds a training corpus of real text from ../shared/data (gcide decompressed streaming, Wikipedia,
   Python docs, NLTK corpora, books, the Jargon File, then trafilatura's HTML pages) up to --train-mb.
2. Training, vocab 32k: llmpipe vs HF BpeTrainer (same pattern, same settings), each in its own
   subprocess; wall time and peak RSS (ru_maxrss) of that process.
3. Encode with the vocabulary llmpipe trained: one thread (one long text) and a batch on --threads
   threads, vs tiktoken (an Encoding built in-process from the same ranks) and HF tokenizers (the same
   tokenizer.json). The ids are checked equal before timing.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "data").resolve()
EOS = "<|endoftext|>"


def _sources() -> Iterator[str]:
    ref = DATA / "reference"
    with gzip.open(ref / "gcide.dict.gz", "rt", encoding="utf-8", errors="replace") as f:
        while chunk := f.read(1 << 20):
            yield chunk
    with bz2.open(ref / "enwiki-2016-excerpt.xml.bz2", "rt", encoding="utf-8", errors="replace") as f:
        yield f.read()
    with tarfile.open(ref / "python-3.11-docs.rst.tar.gz") as t:
        for m in t:
            if m.isfile() and (f := t.extractfile(m)) is not None:
                yield f.read().decode("utf-8", "replace")
    for z in sorted((ref / "nltk").glob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            for name in zf.namelist():
                if not name.endswith("/"):
                    yield zf.read(name).decode("utf-8", "replace")
    for p in sorted((ref / "books").glob("*.txt")):
        yield p.read_text(encoding="utf-8")
    with gzip.open(ref / "jargon.txt.gz", "rt", encoding="latin-1") as f:
        yield f.read()
    for p in sorted((DATA / "html" / "trafilatura-eval").glob("*.html")):
        yield p.read_text(encoding="utf-8", errors="replace")


def build_corpus(path: Path, mb: float) -> int:
    budget = int(mb * 1e6)
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for text in _sources():
            b = text.encode("utf-8", "replace")
            out.write(b[: budget - n].decode("utf-8", "ignore"))
            out.write("\n")
            n += min(len(b), budget - n) + 1
            if n >= budget:
                break
    return path.stat().st_size


TRAIN_OURS = """
import json, resource, sys, time
from llmpipe.tokenizer import Tokenizer
corpus, vocab, pattern, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t = time.perf_counter()
tok = Tokenizer.train([corpus], vocab, pattern=pattern, min_frequency=2)
dt = time.perf_counter() - t
tok.save(out)
print(json.dumps({"seconds": dt, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

TRAIN_HF = """
import json, resource, sys, time
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
corpus, vocab, pattern, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
hf = Tokenizer(models.BPE())
hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
hf.decoder = decoders.ByteLevel()
tr = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
t = time.perf_counter()
hf.train([corpus], tr)
dt = time.perf_counter() - t
hf.save(out)
print(json.dumps({"seconds": dt, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_train(
    script: str, corpus: Path, vocab: int, pattern: str, out: Path, threads: int
) -> dict[str, float]:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "RAYON_RS_NUM_THREADS": str(threads)}
    p = subprocess.run(
        [sys.executable, "-c", script, str(corpus), str(vocab), pattern, str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(p.stdout.strip().splitlines()[-1])


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10 MB training corpus, vocab 8k, 3 MB encode text")
    ap.add_argument("--train-mb", type=float, default=100.0)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--encode-mb", type=float, default=20.0)
    ap.add_argument("--pattern", default="gpt2", choices=["gpt2", "cl100k", "o200k"])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.quick:
        args.train_mb, args.vocab, args.encode_mb = 10.0, 8000, 3.0

    import tiktoken
    from llmpipe.tokenizer import Tokenizer
    from tokenizers import Tokenizer as HFTokenizer

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        corpus = tmp / "corpus.txt"
        size = build_corpus(corpus, args.train_mb)
        print(
            f"training corpus: {size / 1e6:.1f} MB of real text; vocab {args.vocab}; pattern {args.pattern}"
        )
        pattern = Tokenizer.train_from_texts(["x"], 300, pattern=args.pattern).pattern
        ours_json, hf_json = tmp / "ours.json", tmp / "hf.json"
        r_ours = run_train(TRAIN_OURS, corpus, args.vocab, args.pattern, ours_json, args.threads)
        r_hf = run_train(TRAIN_HF, corpus, args.vocab, pattern, hf_json, args.threads)
        same = json.loads(ours_json.read_text())["model"]["merges"] == [
            " ".join(m) if isinstance(m, list) else m
            for m in json.loads(hf_json.read_text())["model"]["merges"]
        ]
        print(f"train  llmpipe {r_ours['seconds']:7.2f} s  peak RSS {r_ours['maxrss_mb']:7.0f} MB")
        print(f"train  HF      {r_hf['seconds']:7.2f} s  peak RSS {r_hf['maxrss_mb']:7.0f} MB")
        print(
            f"train  speed-up vs HF: {r_hf['seconds'] / r_ours['seconds']:.2f}x, "
            f"memory ratio HF/llmpipe: {r_hf['maxrss_mb'] / r_ours['maxrss_mb']:.2f}x, same merges: {same}"
        )

        # -- encode ---------------------------------------------------------------------------
        tok = Tokenizer.from_file(ours_json)
        hf = HFTokenizer.from_file(str(ours_json))
        ranks = {tok.id_to_bytes(i): i for i in range(tok.vocab_size) if i != tok.eos_id}
        enc = tiktoken.Encoding(
            "bench", pat_str=pattern, mergeable_ranks=ranks, special_tokens={EOS: tok.eos_id}
        )
        with open(corpus, encoding="utf-8") as f:
            f.seek(max(0, size // 3))
            f.readline()
            text = f.read(int(args.encode_mb * 1e6))
        docs = [d for d in text.split("\n\n") if d]
        nbytes = len(text.encode("utf-8"))
        ids = tok.encode(text)
        assert ids == enc.encode_ordinary(text), "llmpipe and tiktoken disagree"
        assert ids == hf.encode(text, add_special_tokens=False).ids, "llmpipe and HF disagree"
        print(
            f"encode text: {nbytes / 1e6:.1f} MB, {len(docs)} documents, {len(ids)} tokens (ids equal in all three)"
        )
        rep = 1 if args.quick else 2
        single = {
            "llmpipe": best(lambda: tok.encode(text), rep),
            "tiktoken": best(lambda: enc.encode_ordinary(text), rep),
            "HF": best(lambda: hf.encode(text, add_special_tokens=False), 1),
        }
        batch = {
            "llmpipe": best(lambda: tok.encode_batch_arrays(docs), rep),
            "tiktoken": best(lambda: enc.encode_ordinary_batch(docs, num_threads=args.threads), rep),
            "HF": best(lambda: hf.encode_batch(docs, add_special_tokens=False), 1),
        }
        for name, res in (("1 thread", single), (f"batch, {args.threads} threads", batch)):
            for who, s in res.items():
                print(f"encode {name:20s} {who:9s} {nbytes / s / 1e6:7.2f} MB/s")
            print(
                f"encode {name:20s} llmpipe vs tiktoken {res['tiktoken'] / res['llmpipe']:.2f}x, "
                f"vs HF {res['HF'] / res['llmpipe']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
