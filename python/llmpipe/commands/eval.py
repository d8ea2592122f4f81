"""``llmpipe eval MODEL --text FILE... [--shards DIR]``: loss, perplexity and bits per byte."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from llmpipe.errors import ConfigError, InputError

MLM_SCORES = (
    "an encoder: on shards the masked-LM loss per masked token (no bits per byte: '-'); on texts the "
    "pseudo-log-likelihood (each token masked alone), ppl the pseudo-perplexity, bpb pseudo bits per byte"
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "eval",
        help="loss, perplexity and bits per byte of a run or HF model on texts or shards",
        description="Score a model on text files (.txt: one document; .jsonl[.gz]: the text field of each "
        "line) and/or the val split of a shard directory: loss (nats per token), perplexity and bits per "
        "UTF-8 byte, per input and overall. MODEL is a run directory of the trainer (its latest "
        "checkpoint) or a local HuggingFace causal LM directory. Long documents are scored by sliding "
        "windows (default: disjoint windows of the model's length, as lm-eval's loglikelihood_rolling). "
        "An encoder-decoder run (model.arch=encoder_decoder) reports its span-corruption loss on --shards.",
    )
    p.add_argument("model", type=Path, metavar="MODEL", help="run directory or HF model directory")
    p.add_argument("--text", type=Path, nargs="+", default=[], metavar="FILE", help="text or JSONL files")
    p.add_argument("--shards", type=Path, default=None, metavar="DIR", help="also score DIR's val split")
    p.add_argument("--split", default="val", help="shard split for --shards (default: val)")
    p.add_argument("--field", default="text", help="JSONL field holding the text (default: text)")
    p.add_argument(
        "--max-docs",
        type=int,
        default=None,
        metavar="N",
        help="at most N documents per JSONL file (default, or 0: all of them)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default: 8)")
    p.add_argument("--max-len", type=int, default=None, help="window length (default: the model's)")
    p.add_argument("--stride", type=int, default=None, help="new tokens per window (default: --max-len)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"], help="weights' dtype")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmpipe.eval.model import default_device
    from llmpipe.train.export_t5 import is_t5_run

    default_device(args.device, "--device")  # a device this machine lacks: one line before any work
    if is_t5_run(args.model):
        return run_span_corruption(args)
    from llmpipe.eval import EvalResult, Evaluator, load_lm, read_texts

    if not args.text and args.shards is None:
        raise ConfigError("nothing to evaluate: pass --text FILE... and/or --shards DIR")
    from llmpipe.eval.mlm import EncoderEval, is_encoder_run

    if args.max_docs is not None and args.max_docs < 0:
        raise ConfigError(f"--max-docs {args.max_docs}: a number of documents is 0 (all) or more")
    max_docs = args.max_docs or None  # 0: all
    groups = {str(f): read_texts(f, field=args.field, max_docs=max_docs) for f in args.text}
    for name, docs in groups.items():
        if not any(docs):  # scores of nothing are nan: say so instead
            raise InputError(
                f"{name}: no text to score (an empty file, or no {args.field!r} that is not empty)"
            )
    ev: Evaluator | EncoderEval
    if is_encoder_run(args.model):  # masked-LM loss on shards, pseudo-perplexity on texts (eval/mlm.py)
        ev = EncoderEval(args.model, batch_size=args.batch_size, device=args.device)
    else:
        ev = Evaluator(
            load_lm(args.model, device=args.device, dtype=args.dtype),
            batch_size=args.batch_size,
            stride=args.stride,
            max_len=args.max_len,
            progress=True,
        )
    results = ev.groups(groups) if groups else {}
    if args.shards is not None:
        results[f"{args.shards} ({args.split})"] = ev.shards(args.shards, args.split)
    overall = sum(results.values(), EvalResult(0.0, 0, 0, 0))
    if isinstance(ev, EncoderEval):  # masked-LM loss and pseudo-log-likelihood do not add up
        overall = EvalResult(0.0, 0, 0, 0)
    if args.json:
        out = {
            "model": str(args.model),
            "window": ev.max_len,
            "stride": ev.max_len if isinstance(ev, EncoderEval) else ev.stride or ev.max_len,
            **({"scores": MLM_SCORES} if isinstance(ev, EncoderEval) else {}),
            "inputs": {k: v.to_dict() for k, v in results.items()},
            "overall": overall.to_dict(),
        }
        print(json.dumps(out, indent=2))
        return 0
    if isinstance(ev, EncoderEval):
        print(MLM_SCORES)
    width = max(len(k) for k in [*results, "overall"])
    print(
        f"{'input':<{width}}  {'docs':>6}  {'tokens':>10}  {'bytes':>11}  {'loss':>7}  {'ppl':>9}  {'bpb':>7}"
    )
    for name, r in [*results.items(), *([("overall", overall)] if overall.tokens else [])]:
        bpb = f"{r.bpb:>7.4f}" if r.bytes else f"{'-':>7}"  # a masked-LM loss on shards spells no bytes
        print(
            f"{name:<{width}}  {r.docs:>6}  {r.tokens:>10}  {r.bytes:>11}  {r.loss:>7.4f}  {r.ppl:>9.3f}  {bpb}"
        )
    return 0


def run_span_corruption(args: argparse.Namespace) -> int:
    """An encoder-decoder run: its span-corruption loss on the shards' split (bits per byte is a
    decoder's measure; text files are refused)."""
    from llmpipe.eval.model import default_device
    from llmpipe.train.export_t5 import span_loss

    if args.text or args.shards is None:
        raise ConfigError(
            f"{args.model} is an encoder-decoder run: pass --shards DIR (span-corruption loss on its "
            f"{args.split} split); --text (bits per byte) is for decoders"
        )
    r = span_loss(args.model, args.shards, args.split, batch_size=args.batch_size,
                  device=str(default_device(args.device)))  # fmt: skip
    name = f"{args.shards} ({args.split})"
    if args.json:
        print(
            json.dumps(
                {"model": str(args.model), "objective": "span_corruption", "inputs": {name: r}}, indent=2
            )
        )
        return 0
    print(f"{'input':<{len(name)}}  {'rows':>6}  {'tokens':>10}  {'span loss':>9}  {'ppl':>9}")
    print(f"{name}  {r['rows']:>6}  {r['tokens']:>10}  {r['loss']:>9.4f}  {r['ppl']:>9.3f}")
    return 0
