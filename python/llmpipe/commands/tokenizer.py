"""``llmpipe tokenizer train|encode``: train a byte-level BPE tokenizer, or encode stdin with one."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from llmpipe.tokenizer import EOS, PATTERNS, Tokenizer


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
            "Train byte-level BPE on UTF-8 text files (plain, or gzip/zstd/bz2-compressed: decompressed as "
            "they are read; streamed line by line, counted on all cores) and write an HF tokenizer.json. "
            "Merges follow HF's BpeTrainer (same merges on the same input). An input that is a directory "
            "or not text (Parquet, binary, not UTF-8) is refused; JSONL and crawl files are read as the "
            "text they are (llmpipe curate trains its tokenizer on their documents' text)."
        ),
    )
    t.add_argument(
        "inputs", nargs="+", type=Path, metavar="INPUT", help="UTF-8 text files (.gz, .zst, .bz2 too)"
    )
    t.add_argument("--vocab-size", type=int, required=True, metavar="N", help="vocabulary size (ids)")
    t.add_argument("--out", type=Path, required=True, metavar="FILE", help="tokenizer.json to write")
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out even when it is not a tokenizer llmpipe wrote (default: only a tokenizer.json "
        "llmpipe wrote, byte for byte as it writes one, is replaced)",
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


#: the most bytes of a file read to decide whether llmpipe wrote it (a tokenizer.json of o200k is 7 MB)
MAX_TOKENIZER_BYTES = 256 << 20
#: bytes of decompressed text counted at a time (cut at a line end)
TEXT_BLOCK = 16 << 20


def _ours(path: Path) -> bool:
    """``path`` is new, or a tokenizer.json that llmpipe wrote: it loads, and llmpipe writes that
    tokenizer back byte for byte (a file of the user's, or HF's tokenizers, writes it otherwise)."""
    from llmpipe.errors import LlmpipeError

    if not path.exists() and not path.is_symlink():
        return True
    try:
        if not path.is_file() or path.stat().st_size > MAX_TOKENIZER_BYTES:
            return False
        return Tokenizer.from_file(path).to_json().encode() == path.read_bytes()
    except (LlmpipeError, OSError, ValueError):
        return False


def _check_out(out: Path, overwrite: bool) -> None:
    """Before any work: ``--out`` names a file that may be written (one line if not)."""
    from llmpipe.errors import InputError
    from llmpipe.outdir import file_in_the_way

    if out.is_dir():
        raise InputError(f"--out {out}: is a directory; --out names the tokenizer.json file to write")
    file = file_in_the_way(out.parent)
    if file is not None:
        raise InputError(f"--out {out}: {file} is a file, not a directory")
    if not overwrite and not _ours(out):
        raise InputError(
            f"--out {out}: exists and is not a tokenizer llmpipe wrote; choose another name, or pass "
            "--overwrite to replace it"
        )


def _check_inputs(paths: list[Path]) -> bool:
    """Each input is a readable text file (one line naming the first that is not); True when one of
    them is compressed."""
    from llmpipe.errors import InputError
    from llmpipe.io.compression import compression_of, peek
    from llmpipe.io.read import detect_format

    takes = "tokenizer train takes UTF-8 text files (plain, .gz, .zst or .bz2)"
    compressed = False
    for p in paths:
        if p.is_dir():
            raise InputError(f"{p}: is a directory; {takes}: name the files (such as {p}/*.txt)")
        if not p.is_file():
            raise InputError(f"{p}: no such file")
        try:
            fmt = detect_format(p)
            kind = compression_of(p)
        except OSError as e:
            raise InputError(f"{p}: cannot read ({e.strerror})") from None
        head = peek(p, 1 << 16)
        if fmt == "empty":
            continue
        if fmt in ("parquet", "binary", "truncated") or not _utf8(head):
            what = {"parquet": "a Parquet file", "truncated": "a compressed file cut before its first block"}
            raise InputError(f"{p}: {what.get(fmt, 'not UTF-8 text')}; {takes}")
        compressed = compressed or kind is not None
    return compressed


def _utf8(head: bytes) -> bool:
    """``head`` (the start of a file) is UTF-8 without NUL bytes; a character cut at its end counts."""
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.end == len(head) and len(head) - e.start < 4  # a cut character at the end
    return True


def _train_streamed(paths: list[Path], args: argparse.Namespace, specials: list[str]) -> Tokenizer:
    """Train on inputs of which some are compressed: each decompressed as it is read, a block of lines
    at a time, its words counted as ``Tokenizer.train`` counts a file's."""
    import zlib

    import numpy as np
    import zstandard

    from llmpipe.errors import InputError
    from llmpipe.io.compression import open_binary
    from llmpipe.tokenizer import DocumentCounts

    counts = DocumentCounts(args.pattern)

    def add(block: bytes) -> None:  # whole lines, each ending in a newline: the documents, without it
        data = np.frombuffer(block, dtype=np.uint8)
        ends = np.flatnonzero(data == 10)
        offsets = np.concatenate([[0], ends - np.arange(len(ends))]).astype(np.int64)
        counts.add(offsets, np.delete(data, ends))

    for p in paths:
        rest = b""
        try:
            with open_binary(p) as f:
                while block := f.read(TEXT_BLOCK):
                    block = rest + block
                    cut = block.rfind(b"\n") + 1
                    if cut:
                        add(block[:cut])
                    rest = block[cut:]
        except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
            raise InputError(f"{p}: cannot decompress ({e})") from None
        if rest:
            add(rest + b"\n")
    return counts.train(
        args.vocab_size,
        min_frequency=args.min_frequency,
        max_token_length=args.max_token_length,
        special_tokens=specials,
    )


def run_train(args: argparse.Namespace) -> int:
    from llmpipe.tokenizer import _check_train_args

    specials = args.special_token or [EOS]
    _check_train_args(args.vocab_size, args.min_frequency, args.max_token_length, specials)
    _check_out(args.out, args.overwrite)
    compressed = _check_inputs(args.inputs)
    print(
        f"training a byte-level BPE of {args.vocab_size:,} ids on {len(args.inputs)} file(s)",
        file=sys.stderr,
        flush=True,
    )
    if compressed:
        tok = _train_streamed(args.inputs, args, specials)
    else:
        tok = Tokenizer.train(
            args.inputs,
            args.vocab_size,
            pattern=args.pattern,
            min_frequency=args.min_frequency,
            max_token_length=args.max_token_length,
            special_tokens=specials,
        )
    if tok.vocab_size < args.vocab_size:
        print(
            f"llmpipe: warning: the inputs gave only {tok.vocab_size:,} of the {args.vocab_size:,} ids asked "
            f"for (too little text, or no pair occurs --min-frequency {args.min_frequency} times more)",
            file=sys.stderr,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp-{os.getpid()}")  # a name of llmpipe's (outdir.TEMP_NAME)
    try:
        tok.save(tmp)
        tmp.replace(args.out)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"wrote {args.out}: vocab {tok.vocab_size}, pattern {args.pattern}, special tokens {specials}")
    return 0


def run_encode(args: argparse.Namespace) -> int:
    tok = Tokenizer.from_file(args.tokenizer)
    text = sys.stdin.buffer.read().decode("utf-8", "replace")
    ids = tok.encode(text, allowed_special="all" if args.allow_special else None)
    sys.stdout.write(" ".join(map(str, ids)) + "\n")
    return 0
