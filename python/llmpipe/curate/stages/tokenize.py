"""Byte-level BPE: train a tokenizer on a sample of the kept text, then encode every kept document."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pyarrow as pa

from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import TOKENS_SCHEMA, StageCounts, apply_reasons, word_counts
from llmpipe.curate.workdir import iter_arrow

if TYPE_CHECKING:
    from llmpipe.curate.settings import TokenizerConfig
    from llmpipe.tokenizer import Tokenizer


class Tokenize:
    """Documents -> token ids (one Rust call per batch). Tokens in are words, out BPE tokens; a
    document that encodes to nothing is dropped as ``empty_after_tokenize``. The output batch is
    ``TOKENS_SCHEMA``: the ids and the words of each kept document."""

    name: ClassVar[str] = "tokenize"
    schema: ClassVar[pa.Schema] = TOKENS_SCHEMA

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        words = word_counts(batch)
        ids, offsets = self.tokenizer.encode_column(batch.column("text"))
        lengths = np.diff(offsets)
        tokens = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(ids, pa.uint32()))
        out = pa.RecordBatch.from_arrays([tokens, pa.array(words)], schema=TOKENS_SCHEMA)
        reasons = ["empty_after_tokenize" if n == 0 else None for n in lengths.tolist()]
        return apply_reasons(out, reasons, counts, words, words_out=lengths)


class TrainTokenizer:
    """Trains a byte-level BPE on the first ``sample_bytes`` of kept text, in input order; the special
    tokens are <|endoftext|> (id 0) and then ``tokenizer.special_tokens`` (ids 1, 2, ...). The sample is
    each document and a newline while the budget lasts; its words are counted straight from the Arrow
    buffers of the documents (no sample file, no Python string per document)."""

    def __init__(self, cfg: TokenizerConfig, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.log = log

    def run(self, docs: Sequence[Path], out: Path) -> None:
        from llmpipe.tokenizer import EOS, DocumentCounts

        budget = self.cfg.sample_bytes
        counts = DocumentCounts(self.cfg.pattern)
        for col in _text_columns(docs):
            if budget <= 0:
                break
            offsets, data = string_buffers(col)
            sizes = np.diff(offsets) + 1
            ends = np.cumsum(sizes)
            take = int(np.count_nonzero(ends - sizes < budget))  # counted while budget > 0
            if take:
                counts.add(offsets[: take + 1], data)
                budget -= int(ends[take - 1])
        reserved = self.cfg.reserved()
        self.log(
            f"tokenizer: training byte-level BPE, vocab {self.cfg.vocab_size}, "
            f"on {counts.bytes:,} bytes of kept text"
            + (f", {len(reserved)} special tokens reserved" if reserved else "")
        )
        tok = counts.train(
            self.cfg.vocab_size,
            min_frequency=self.cfg.min_frequency,
            special_tokens=[EOS, *reserved],
        )
        if tok.vocab_size < self.cfg.vocab_size:
            self.log(
                f"tokenizer: note: the kept text gave only {tok.vocab_size:,} of the {self.cfg.vocab_size:,} ids "
                f"asked for (too little text, or no pair occurs min_frequency {self.cfg.min_frequency} times more)"
            )
        tmp_tok = out.with_name(".tokenizer.tmp.json")
        tok.save(str(tmp_tok))
        os.replace(tmp_tok, out)


def reserved_ids(tokenizer_file: Path, names: Sequence[str], where: str) -> dict[str, int]:
    """The ids of the special tokens ``names`` in the tokenizer (ConfigError naming those it lacks):
    what the manifest records as ``tokenizer.special_tokens``."""
    from llmpipe.errors import ConfigError
    from llmpipe.tokenizer import Tokenizer

    have = Tokenizer.from_file(str(tokenizer_file)).special_tokens
    missing = [n for n in names if n not in have]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ConfigError(
            f"{where}: tokenizer.special_tokens names {shown}, which the tokenizer does not hold as special "
            "tokens (a given tokenizer keeps its own; curate without one to train a tokenizer that reserves them)"
        )
    return {n: have[n] for n in names}


def _text_columns(docs: Sequence[Path]) -> Iterator[pa.ChunkedArray | pa.Array]:
    for path in docs:
        for batch in iter_arrow(path, batch_size=1000, columns=["text"]):
            yield batch.column("text")
