"""``llmpipe tokenizer train|encode``: train a byte-level BPE tokenizer, or encode stdin with one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmpipe.tokenizer import EOS, PATTERNS


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "tokenizer",
        help="train a byte-level BPE tokenizer or encode text with one",
        description="Byte-level BPE tokenizers that HF tokenizers loads (tokenizer.json) with the same ids.",
    )
    tsub = p.add_subparsers(title="tokenizer commands", metavar="COMMAND", required=True)

    t = tsub.add_parser(
        "train",
        help="train on text files and write tokenizer.json",
        description=(
            "Train byte-level BPE on text files (streamed line by line, counted on all cores) and write an "
            "HF tokenizer.json. Merges follow HF's BpeTrainer (same merges on the same input)."
        ),
    )
    t.add_argument("inputs", nargs="+", type=Path, metavar="INPUT", help="UTF-8 text files")
    t.add_argument("--vocab-size", type=int, required=True, metavar="N", help="vocabulary size (ids)")
    t.add_argument("--out", type=Path, required=True, metavar="FILE", help="tokenizer.json to write")
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out even when it is not a tokenizer.json (default: only a tokenizer is replaced)",
    )
    t.add_argument("--pattern", choices=PATTERNS, default="gpt2", help="pre-tokenizer regex (default gpt2)")
    t.add_argument(
        "--min-frequency", type=int, default=2, metavar="N", help="stop when the best pair occurs fewer times"
    )
    t.add_argument("--max-token-length", type=int, metavar="N", help="longest token in bytes (HF semantics)")
    t.add_argument(
        "--special-token",
        action="append",
        metavar="T",
        help=f"special token (repeatable; default {EOS}); they take the first ids",
    )
    t.set_defaults(func=run_train)

    e = tsub.add_parser(
        "encode",
        help="encode stdin and print the ids on one line",
        description="Read UTF-8 text from stdin and print its token ids, space-separated, on one line.",
    )
    e.add_argument("--tokenizer", type=Path, required=True, metavar="FILE", help="tokenizer.json")
    e.add_argument("--allow-special", action="store_true", help="recognise special-token strings in the text")
    e.set_defaults(func=run_encode)


def _replaceable(path: Path) -> bool:
    """``path`` is new, or an HF tokenizer.json (what ``tokenizer train`` writes), not another file."""
    import json

    if not path.exists():
        return True
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("model"), dict) and "vocab" in data["model"]


def run_train(args: argparse.Namespace) -> int:
    from llmpipe.errors import InputError
    from llmpipe.tokenizer import Tokenizer

    if not args.overwrite and not _replaceable(args.out):
        raise InputError(
            f"--out {args.out}: exists and is not a tokenizer.json llmpipe could have written; choose another "
            "name, or pass --overwrite to replace it"
        )
    specials = args.special_token or [EOS]
    if all(p.is_file() for p in args.inputs):  # else Tokenizer.train says which one is missing
        print(
            f"training a byte-level BPE of {args.vocab_size:,} ids on {len(args.inputs)} file(s)",
            file=sys.stderr,
            flush=True,
        )
    tok = Tokenizer.train(
        args.inputs,
        args.vocab_size,
        pattern=args.pattern,
        min_frequency=args.min_frequency,
        max_token_length=args.max_token_length,
        special_tokens=specials,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tok.save(tmp)
    tmp.replace(args.out)
    print(f"wrote {args.out}: vocab {tok.vocab_size}, pattern {args.pattern}, special tokens {specials}")
    return 0


def run_encode(args: argparse.Namespace) -> int:
    from llmpipe.tokenizer import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer)
    text = sys.stdin.buffer.read().decode("utf-8", "replace")
    ids = tok.encode(text, allowed_special="all" if args.allow_special else None)
    sys.stdout.write(" ".join(map(str, ids)) + "\n")
    return 0
