"""The classifier stage's scoring vs ``transformers.pipeline("text-classification")``, same texts, same run.

    python bench/bench_classifier.py [--docs 64] [--threads 1] [--batch-size 16]
    python bench/bench_classifier.py --device cuda --docs 512 --batch-size 64 --pipeline-batch 64

A BERT-base-sized classifier (12 layers, hidden 768, 12 heads, 512 positions, 2 labels, random weights)
and a WordPiece tokenizer trained on the crawl text are built in a temporary directory with
save_pretrained. Both sides score the same real crawl documents (truncated to 512 tokens) on
``--threads`` torch threads, fp32 on CPU: llmpipe's ``hf_models.Loaded.run`` (length-sorted batches,
what the stage runs per key file) and the pipeline (its default: one document at a time, the way a
user calls it; ``--pipeline-batch`` gives it a batch size too). Prints documents/s per CPU core of
both, the ratio, and the largest score difference (the scores must agree): the headline is the second
pass over the texts (steady state, as over a long run), the first pass (every batch shape new to the
kernels) is printed beside it. With ``--device cuda`` both sides run in bf16 on the GPU (the stage's
choice there) and the rate is documents/s of the device. ``--breakdown`` also times llmpipe's
tokenizing, model calls and copies back.
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


def timed(fn, cuda: bool):  # type: ignore[no-untyped-def]
    """Seconds of ``fn()`` (the GPU's work finished) and its result."""
    import torch

    t0 = time.perf_counter()
    out = fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def breakdown(loaded, texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Where llmpipe's time goes: tokenizing, then per batch the model call (synchronized) and the copy back."""
    import torch

    sync = torch.cuda.synchronize if loaded.device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    ids = loaded.encode(texts)
    t_enc = time.perf_counter() - t0
    t_fwd = t_out = 0.0
    widths = []
    for sel in loaded.batches(ids):
        t1 = time.perf_counter()
        res, _ = loaded.forward([ids[j] for j in sel])
        sync()
        t2 = time.perf_counter()
        res.logits.float().cpu().numpy()
        t_out += time.perf_counter() - t2
        t_fwd += t2 - t1
        widths.append(max(len(ids[j]) for j in sel))
    print(
        f"breakdown: tokenize {t_enc:.3f} s, model {t_fwd:.3f} s over {len(widths)} batches "
        f"(widths {min(widths)}-{max(widths)}), copy back {t_out:.3f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--pipeline-batch", type=int, default=1)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: both sides in bf16")
    ap.add_argument(
        "--breakdown", action="store_true", help="also time llmpipe's tokenizing, padding and model"
    )
    args = ap.parse_args()

    import torch
    from hf_tiny import crawl_texts, tokenizer
    from llmpipe.curate.stages import hf_models
    from llmpipe.curate.stages.classifier import ClassifierModel, ClassifierModelConfig, scores_of
    from transformers import BertConfig, BertForSequenceClassification, pipeline

    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
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
        loaded.run(texts[:2])  # loads the model
        t_mine_cold, _ = timed(lambda: loaded.run(texts), cuda)  # first pass: every batch shape is new
        t_mine, logits = timed(lambda: loaded.run(texts), cuda)  # steady state, as over a long run
        mine = scores_of(logits, m.head)
        if args.breakdown:
            breakdown(loaded, texts)

        assert cuda == (loaded.device.type == "cuda"), "the stage picks CUDA whenever torch sees a GPU"
        pipe = pipeline(
            "text-classification", model=str(model_dir), truncation=True, top_k=None, device=args.device,
            dtype=torch.bfloat16 if cuda else torch.float32,
        )  # fmt: skip
        pipe(texts[:2])
        t_pipe_cold, _ = timed(lambda: pipe(texts, batch_size=args.pipeline_batch), cuda)
        t_pipe, res = timed(lambda: pipe(texts, batch_size=args.pipeline_batch), cuda)
        ref = np.array([next(x["score"] for x in r if x["label"] == "high") for r in res])

    where = torch.cuda.get_device_name() + " (bf16)" if cuda else f"{args.threads} thread(s)"
    unit = "docs/s" if cuda else "docs/s per core"
    rate = lambda t: len(texts) / t / (1 if cuda else args.threads)  # noqa: E731
    print(f"{len(texts)} documents, {n_tokens} tokens (<= 512 each), {where}, BERT-base size")
    print(f"llmpipe classifier: {rate(t_mine):.2f} {unit} (batch {args.batch_size}, length-sorted)")
    print(f"transformers.pipeline: {rate(t_pipe):.2f} {unit} (batch {args.pipeline_batch})")
    print(f"ratio: {t_pipe / t_mine:.2f}x; largest score difference {np.abs(mine - ref).max():.2e}")
    print(
        f"first pass (every shape new): llmpipe {rate(t_mine_cold):.2f}, pipeline {rate(t_pipe_cold):.2f} "
        f"{unit}, ratio {t_pipe_cold / t_mine_cold:.2f}x"
    )


if __name__ == "__main__":
    main()
