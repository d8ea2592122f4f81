"""Context parallelism's bookkeeping on real packed rows, without processes: each cp rank's chunks (the
load-balanced causal split), its rotary positions and its attention masks against the gathered keys are
the corresponding rows and columns of the one-process model's, for SDPA's dense mask and FlexAttention's
block mask alike. The end-to-end runs (losses, gradients, resume at another cp) are in
test_train_layouts.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.errors import ConfigError
from llmpipe.train.context_parallel import ContextParallel
from llmpipe.train.model import doc_mask, rope_tables
from torch.nn.attention.flex_attention import BlockMask


class FakeGroup(ContextParallel):
    """One rank of a cp group whose all-gather of document ids is computed from the full row (the
    collective itself runs in the torchrun tests)."""

    def __init__(self, size: int, rank: int, full_doc_ids: torch.Tensor) -> None:
        super().__init__(None, size, rank)  # type: ignore[arg-type]
        self.full = full_doc_ids

    def _gather_ids(self, ids: torch.Tensor) -> torch.Tensor:
        n_local = ids.shape[1]
        return self.full[:, self.gathered_positions(n_local, ids.device)]


def test_each_rank_holds_its_chunks_and_masks_the_full_rows(byte_shards: Path) -> None:
    ds = ShardDataset(byte_shards, "train")
    full = next(iter(TokenLoader(ds, 4, seed=5, prefetch=1)))
    assert full.doc_ids is not None and int(full.doc_ids.max()) > 0  # several documents per row
    n = full.input.shape[1]
    rope = rope_tables(16, n, 10000.0, torch.device("cpu"))
    want = doc_mask(full.doc_ids, "sdpa")  # [B, 1, L, L]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for size in (2, 4):
        seen, work = [], []
        for rank in range(size):
            cp = FakeGroup(size, rank, full.doc_ids)
            mine = cp.shard(full)
            pos = cp.positions(n // size, rank, torch.device("cpu"))
            c = n // (2 * size)  # chunks rank and 2*size-1-rank, in order
            assert pos.tolist() == [
                *range(rank * c, (rank + 1) * c),
                *range(n - (rank + 1) * c, n - rank * c),
            ]
            seen += pos.tolist()
            assert torch.equal(mine.input, full.input[:, pos]) and torch.equal(
                mine.target, full.target[:, pos]
            )
            assert mine.doc_ids is not None and torch.equal(mine.doc_ids, full.doc_ids[:, pos])
            keys = cp.gathered_positions(n // size, torch.device("cpu"))
            assert sorted(keys.tolist()) == list(range(n))
            for kind in ("sdpa", "flex"):
                r, ex = cp.attention_inputs(rope, n // size, mine.doc_ids, kind)  # type: ignore[arg-type]
                assert torch.equal(r, rope[:, pos])  # rotary tables at the global positions
                expect = want[:, :, pos][:, :, :, keys]
                if isinstance(ex.mask, BlockMask):
                    b, h, q, kv = torch.meshgrid(
                        torch.arange(4), torch.zeros(1, dtype=torch.long), torch.arange(n // size),
                        torch.arange(n), indexing="ij",
                    )  # fmt: skip
                    got = ex.mask.mask_mod(b, h, q, kv)
                    assert ex.mask.shape[-2:] == (n // size, n)
                else:
                    got = ex.mask
                assert torch.equal(got.expand_as(expect), expect), (size, rank, kind)
            # without a document mask: causal by global position
            _, plain = cp.attention_inputs(rope, n // size, None, "sdpa")
            assert isinstance(plain.mask, torch.Tensor)
            assert torch.equal(plain.mask[0, 0], causal[pos][:, keys])
            work.append(int(causal[pos].sum()))
        assert sorted(seen) == list(range(n))
        assert len(set(work)) == 1, work  # load-balanced: every rank scores as many (query, key) pairs

    with pytest.raises(ConfigError, match="must be a multiple of 8") as e:
        ContextParallel(None, 4, 0).check_seq_len(60)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)
