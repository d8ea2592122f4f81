"""Byte-level shards of any UTF-8 text, without training a tokenizer: ids 0-255 are the bytes, 256 is EOS.

    python -m llmpipe.train.byte_shards TEXT_FILE OUT_DIR [--seq-len 64]

Used by the trainer's tests and benchmark (real text, no dependency on the BPE stage) and handy for a
first run. Blank-line-separated paragraphs become documents. Written by the real ShardWriter with a
real HF tokenizer.json (byte-level BPE without merges), so export and generation work as usual.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from llmpipe.data import ShardWriter

EOS = 256
VOCAB = 257


def byte_tokenizer_json() -> str:
    """GPT-2's byte-to-unicode alphabet as a BPE vocabulary with no merges: encode(text) == utf-8 bytes."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    }
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    tok = Tokenizer(BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return str(tok.to_str())


def byte_shard_writer(out: Path, *, seq_len: int, **options: Any) -> ShardWriter:
    """A ``ShardWriter`` for byte tokens into ``out`` (created), with the byte tokenizer beside it."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(byte_tokenizer_json())
    return ShardWriter(
        out, seq_len=seq_len, vocab_size=VOCAB, eos_id=EOS, tokenizer_file=out / "tokenizer.json", **options
    )


def write_byte_shards(
    text_file: Path, out: Path, *, seq_len: int = 64, max_chars: int | None = None, val_fraction: float = 0.05
) -> Path:
    text = text_file.read_text(encoding="utf-8")
    if max_chars is not None:
        text = text[:max_chars]
    docs = [p.strip() for p in text.split("\n\n") if p.strip()]
    w = byte_shard_writer(
        out,
        seq_len=seq_len,
        samples_per_shard=4096,
        val_fraction=val_fraction,
        provenance={"source": str(text_file), "tokenizer": "utf-8 bytes"},
    )
    w.add_documents(np.frombuffer(d.encode("utf-8"), dtype=np.uint8).astype(np.uint16) for d in docs)
    w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m llmpipe.train.byte_shards",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("text", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--seq-len", type=int, default=64)
    args = p.parse_args(argv)
    write_byte_shards(args.text, args.out, seq_len=args.seq_len)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
