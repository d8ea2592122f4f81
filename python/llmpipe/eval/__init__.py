"""Evaluation of causal LMs: loss, perplexity and bits per byte on texts.

    from llmpipe.eval import evaluate
    r = evaluate("runs/tiny", ["some text", ...])            # a run directory or a local HF model dir
    r = evaluate(hf_model, texts, tokenizer=hf_tokenizer)    # a model in memory
    r.loss, r.ppl, r.bpb, r.tokens, r.bytes

Bits per byte = total NLL in nats / (ln 2 * UTF-8 bytes): comparable across tokenizers. Long texts are
scored by sliding windows (lm-evaluation-harness's rolling loglikelihood by default).
"""

from llmpipe.eval.core import Evaluator, evaluate
from llmpipe.eval.inputs import read_texts
from llmpipe.eval.model import LM, load_lm, wrap_lm
from llmpipe.eval.score import EvalResult, score_windows, windows

__all__ = [
    "LM",
    "EvalResult",
    "Evaluator",
    "evaluate",
    "load_lm",
    "read_texts",
    "score_windows",
    "windows",
    "wrap_lm",
]
