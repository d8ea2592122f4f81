"""`llmpipe eval` vs lm-evaluation-harness's loglikelihood_rolling: tokens scored per CPU second.

    python bench/bench_eval.py [--docs 40] [--dim 256] [--layers 4] [--seq-len 256] [--batch-size 8]

Builds a Llama model (random weights: speed does not depend on them) with a BPE tokenizer that llmpipe
trains on real web text, saves it as llmpipe export writes it, and scores the same web documents with
both: llmpipe.eval's Evaluator (default stride = lm-eval's rolling windows) and lm-eval's HFLM
``loglikelihood_rolling`` (same batch size). Checks that the summed log-likelihoods agree, then prints
tokens per second of each (CPU seconds of this process) and the ratio. lm-eval's hf model needs the
``accelerate`` package.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "data").resolve()


def build_model(out: Path, texts: list[str], dim: int, layers: int, seq_len: int) -> None:
    import torch
    from llmpipe.tokenizer import Tokenizer
    from llmpipe.train.export_hf import tokenizer_files
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = Tokenizer.train_from_texts(texts, 2048)
    cfg = LlamaConfig(
        vocab_size=tok.vocab_size, hidden_size=dim, intermediate_size=dim * 8 // 3, num_hidden_layers=layers,
        num_attention_heads=dim // 64, max_position_embeddings=seq_len, bos_token_id=tok.eos_id,
        eos_token_id=tok.eos_id, pad_token_id=tok.eos_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    for name, text in tokenizer_files(tok.to_json(), tok.eos_id, seq_len).items():
        (out / name).write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=40)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    import torch
    from llmpipe.eval import Evaluator, load_lm, read_texts

    torch.set_num_threads(1)
    texts = read_texts(DATA / "web" / "cc-main-2019-30-extracted.jsonl.gz", max_docs=args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        build_model(model_dir, texts, args.dim, args.layers, args.seq_len)
        ev = Evaluator(load_lm(model_dir, device="cpu"), batch_size=args.batch_size)
        t0 = time.process_time()
        ours = ev.texts(texts)
        t_ours = time.process_time() - t0

        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM

        lm = HFLM(pretrained=str(model_dir), batch_size=args.batch_size, device="cpu")
        reqs = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]
        t0 = time.process_time()
        theirs = lm.loglikelihood_rolling(reqs, disable_tqdm=True)
        t_theirs = time.process_time() - t0
    nll_theirs = -sum(theirs)
    assert abs(nll_theirs - ours.nll) < 1e-3 * ours.nll, (nll_theirs, ours.nll)
    out = {
        "docs": len(texts),
        "tokens": ours.tokens,
        "llmpipe_tokens_per_cpu_s": ours.tokens / t_ours,
        "lm_eval_tokens_per_cpu_s": ours.tokens / t_theirs,
        "ratio": t_theirs / t_ours,
        "bpb": ours.bpb,
        "model": f"llama dim {args.dim} x {args.layers} layers, window {args.seq_len}, batch {args.batch_size}",
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
