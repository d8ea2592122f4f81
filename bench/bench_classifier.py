"""The classifier stage's scoring vs ``transformers.pipeline("text-classification")``, same texts, same run.

    python bench/bench_classifier.py [--docs 64] [--threads 1] [--batch-size 16]

A BERT-base-sized classifier (12 layers, hidden 768, 12 heads, 512 positions, 2 labels, random weights)
and a WordPiece tokenizer trained on the crawl text are built in a temporary directory with
save_pretrained. Both sides score the same real crawl documents (truncated to 512 tokens) on
``--threads`` torch threads, fp32 on CPU: llmpipe's ``hf_models.Loaded.run`` (length-sorted batches,
what the stage runs per key file) and the pipeline (its default: one document at a time, the way a
user calls it; ``--pipeline-batch`` gives it a batch size too). Prints documents/s per CPU core of
both, the ratio, and the largest score difference (the scores must agree).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "tests"))  # the tiny-model helpers of the tests: the same tokenizer recipe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--pipeline-batch", type=int, default=1)
    args = ap.parse_args()

    import torch
    from hf_tiny import crawl_texts, tokenizer
    from llmpipe.curate.stages import hf_models
    from llmpipe.curate.stages.classifier import ClassifierModel, ClassifierModelConfig, scores_of
    from transformers import BertConfig, BertForSequenceClassification, pipeline

    torch.set_num_threads(args.threads)
    texts = crawl_texts(DATA, args.docs)
    with tempfile.TemporaryDirectory() as d:
        model_dir = Path(d) / "bert-base"
        tok = tokenizer(DATA, vocab=8000, max_length=512)
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=max(len(tok), 8000), num_labels=2, id2label={0: "low", 1: "high"},
                         label2id={"low": 0, "high": 1})  # fmt: skip
        BertForSequenceClassification(cfg).eval().save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        n_tokens = sum(len(x) for x in tok(texts, truncation=True)["input_ids"])

        m = ClassifierModel(
            ClassifierModelConfig(model=str(model_dir), label="high", batch_size=args.batch_size)
        )
        loaded = hf_models.Loaded(m.spec)
        torch.set_num_threads(args.threads)
        loaded.run(texts[:2])  # warm-up
        t0 = time.perf_counter()
        mine = scores_of(loaded.run(texts), m.head)
        t_mine = time.perf_counter() - t0

        pipe = pipeline(
            "text-classification", model=str(model_dir), truncation=True, top_k=None, device="cpu"
        )
        pipe(texts[:2])
        t0 = time.perf_counter()
        res = pipe(texts, batch_size=args.pipeline_batch)
        t_pipe = time.perf_counter() - t0
        ref = np.array([next(x["score"] for x in r if x["label"] == "high") for r in res])

    per_core = lambda t: len(texts) / t / args.threads  # noqa: E731
    print(
        f"{len(texts)} documents, {n_tokens} tokens (<= 512 each), {args.threads} thread(s), BERT-base size"
    )
    print(
        f"llmpipe classifier: {per_core(t_mine):.2f} docs/s per core (batch {args.batch_size}, length-sorted)"
    )
    print(f"transformers.pipeline: {per_core(t_pipe):.2f} docs/s per core (batch {args.pipeline_batch})")
    print(f"ratio: {t_pipe / t_mine:.2f}x; largest score difference {np.abs(mine - ref).max():.2e}")


if __name__ == "__main__":
    main()
