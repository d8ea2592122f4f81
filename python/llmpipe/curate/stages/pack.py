"""The sink of the pipeline: token ids -> fixed-length samples in Arrow IPC shards and a manifest."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmpipe.curate.stage import StageCounts
from llmpipe.curate.workdir import iter_arrow
from llmpipe.data.format import TOKENIZER_FILE

if TYPE_CHECKING:
    from llmpipe.curate.settings import PackConfig
    from llmpipe.data.writer import ShardWriter


#: documents per batch read back from the token files
BATCH_DOCS = 1000


class Pack:
    """Packs the tokenised documents of every input, in input order, into ``staging``; returns the
    manifest. Counts documents in and out (all packed), tokens in (without EOS) and out (as packed).
    ``reserved``: special tokens the manifest records with their ids (``tokenizer.special_tokens``)."""

    name: ClassVar[str] = "pack"

    def __init__(
        self,
        cfg: PackConfig,
        tokenizer_file: Path,
        provenance: dict[str, Any],
        reserved: Sequence[str] = (),
    ) -> None:
        self.cfg = cfg
        self.tokenizer_file = tokenizer_file
        self.provenance = provenance
        self.reserved = list(reserved)

    def run(self, token_files: Sequence[Path], staging: Path, counts: StageCounts) -> dict[str, Any]:
        packing = self.start(staging, counts)
        for path in token_files:
            packing.add(path)
        return packing.close()

    def start(self, staging: Path, counts: StageCounts) -> Packing:
        """A pack into ``staging`` (emptied) that takes the token files one at a time, in input order:
        the driver packs an input while the workers still tokenize the ones after it."""
        from llmpipe.curate.stages.tokenize import reserved_ids
        from llmpipe.data.writer import ShardWriter
        from llmpipe.tokenizer import Tokenizer

        tok = Tokenizer.from_file(str(self.tokenizer_file))
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        shutil.copyfile(self.tokenizer_file, staging / TOKENIZER_FILE)
        writer = ShardWriter(
            staging,
            seq_len=self.cfg.seq_len,
            vocab_size=tok.vocab_size,
            eos_id=tok.eos_id,
            tokenizer_file=staging / TOKENIZER_FILE,
            samples_per_shard=self.cfg.samples_per_shard,
            val_fraction=self.cfg.val_fraction,
            provenance=self.provenance,
            packing=self.cfg.packing,
            best_fit_window=self.cfg.best_fit_window,
            special_tokens=reserved_ids(self.tokenizer_file, self.reserved, "pack")
            if self.reserved
            else None,
        )
        return Packing(writer, counts)


class Packing:
    """One pack in progress: token files added in input order, then closed into the manifest."""

    def __init__(self, writer: ShardWriter, counts: StageCounts) -> None:
        self.writer = writer
        self.counts = counts

    def add(self, path: Path) -> None:
        """Pack the documents of one token file (a few at a time: the tokenize step writes row groups
        of 1,000, so memory does not grow with the input, nor with the size of its parts)."""
        counts = self.counts
        for batch in iter_arrow(path, batch_size=BATCH_DOCS, columns=["tokens"]):
            col = batch.column("tokens")
            offsets = col.offsets.to_numpy().astype(np.int64)
            flat = col.values.to_numpy(zero_copy_only=False)
            flat = flat[offsets[0] : offsets[-1]]  # a sliced column's offsets need not start at 0
            offsets -= offsets[0]
            counts.docs_in += len(col)
            counts.docs_out += len(col)
            counts.tokens_in += len(flat)
            self.writer.add_flat(flat, offsets)

    def close(self) -> dict[str, Any]:
        """The last sample, the shards and the manifest; returns the manifest."""
        manifest = self.writer.close()
        self.counts.tokens_out = manifest["counts"]["tokens"]
        return manifest
