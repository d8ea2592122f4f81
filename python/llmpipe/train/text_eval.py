"""Bits per byte on named text sets during training (the ``eval`` config section).

The texts are tokenised once with the shards' tokenizer and cut into llmpipe.eval's windows; each
evaluation splits the windows over the ranks (every rank runs the same number of forward passes, as
FSDP needs) and sums the log-likelihoods over ranks. Records ``bpb/NAME`` and ``eval_loss/NAME``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import torch
from torch import nn

from llmpipe.errors import ConfigError
from llmpipe.eval import read_texts, score_windows, windows
from llmpipe.eval.score import LN2, Window
from llmpipe.train.config import EvalConfig
from llmpipe.train.parallel import all_reduce_sum


class TextEval:
    def __init__(
        self, cfg: EvalConfig, tokenizer_file: Path, prefix_id: int, max_len: int, steps: int
    ) -> None:
        from tokenizers import Tokenizer

        if not tokenizer_file.is_file():
            raise ConfigError(f"eval.sets need the shards' tokenizer, and {tokenizer_file} is missing")
        tok = Tokenizer.from_file(str(tokenizer_file))
        tok.encode_special_tokens = True  # text is text: a literal "<mask>" is not the special id (as curate)
        self.cfg, self.steps = cfg, steps
        self.sets: dict[str, tuple[list[Window], int, int]] = {}  # windows, tokens, bytes
        for name, path in cfg.sets.items():
            texts = read_texts(path, max_docs=cfg.max_docs)
            docs = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
            n_bytes = sum(len(t.encode("utf-8", "replace")) for t in texts)
            self.sets[name] = (windows(docs, prefix_id, max_len), sum(map(len, docs)), n_bytes)
        self.pad = prefix_id

    def due(self, step: int) -> bool:
        every = self.cfg.every
        return bool(every) and (step % every == 0 or step == self.steps)

    @torch.no_grad()
    def evaluate(
        self,
        model: nn.Module,
        device: torch.device,
        rank: int,
        world_size: int,
        amp: Callable[[], AbstractContextManager[None]],
        copies: int = 1,  # ranks that score the same windows (tensor parallelism): counted once
    ) -> dict[str, float]:
        def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            with amp():
                return model(ids)

        model.eval()
        rec: dict[str, float] = {}
        for name, (ws, tokens, n_bytes) in self.sets.items():
            nll = score_windows(
                forward, ws, batch_size=self.cfg.batch_size, device=device, pad_id=self.pad,
                rank=rank, world_size=world_size,
            )  # fmt: skip
            (total,) = all_reduce_sum([float(nll.sum())], device)
            total /= copies
            rec[f"bpb/{name}"] = total / (LN2 * max(n_bytes, 1))
            rec[f"eval_loss/{name}"] = total / max(tokens, 1)
        model.train()
        return rec
