"""Scores of an encoder run (``model.arch=encoder``): masked-LM loss and pseudo-perplexity.

``llmpipe eval RUN --shards DIR`` gives the masked-LM loss on the split with the run's masking (``mlm``
section) and the validation masks the trainer scores (train/mlm.py): nats per masked token. On texts
(``--text``) each token is masked alone and predicted from the rest of its window (Salazar et al.'s
pseudo-log-likelihood): loss is the mean pseudo-NLL per token, ppl the pseudo-perplexity, bpb the pseudo
bits per UTF-8 byte. One forward per token: meant for a few documents (``--max-docs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from llmpipe.config import load_yaml
from llmpipe.eval.score import EvalResult


def is_encoder_run(path: Path) -> bool:
    cfg = path / "config.yaml"
    if not cfg.is_file() or not (path / "checkpoints").is_dir():
        return False
    saved = load_yaml(cfg)
    return isinstance(saved.get("model"), dict) and saved["model"].get("arch") == "encoder"


class EncoderEval:
    def __init__(self, run_dir: Path, *, batch_size: int = 8, device: str = "auto") -> None:
        from tokenizers import Tokenizer

        from llmpipe.data.format import TOKENIZER_FILE
        from llmpipe.eval.model import default_device
        from llmpipe.train.export_hf import load_run
        from llmpipe.train.mlm import Masker, random_from

        self.cfg, model, _ = load_run(run_dir, encoder=True)
        self.device = default_device(None if device == "auto" else device)
        self.model = model.to(self.device)
        shards = self.cfg.data.path if self.cfg.data.path is not None else self.cfg.data.sources[0].path
        assert shards is not None and self.cfg.mlm.mask_token_id is not None
        self.tok = Tokenizer.from_file(str(shards / TOKENIZER_FILE))
        self.tok.encode_special_tokens = True  # a literal "<mask>" in a text is text, as curate encodes it
        self.mask_id = self.cfg.mlm.mask_token_id
        self.batch_size = batch_size
        self.max_len = self.cfg.model.max_seq_len or 512
        self.masker = lambda ds: Masker(
            self.cfg.mlm,
            mask_id=self.mask_id,
            eos_id=ds.eos_id,
            n_random=ds.vocab_size,
            random_from=random_from(ds.special_tokens, ds.eos_id),  # as the trainer draws them
        )

    @torch.no_grad()
    def shards(self, directory: Path, split: str = "val") -> EvalResult:
        """Masked-LM loss over the split (the trainer's validation masks, document masks as in training)."""
        from llmpipe.data import ShardDataset, TokenLoader

        ds = ShardDataset(directory, split)
        ds.require_samples(f"pass --shards DIR with a {split} split, or --split train")
        masker = self.masker(ds)
        batch = min(self.batch_size, len(ds))
        loader = TokenLoader(ds, batch, seed=0, device=self.device, prefetch=1, infinite=False)
        nll, tokens = 0.0, 0
        for i, b in enumerate(loader):
            mb = masker.validation(b, i, 0)
            logits = self.model(mb.input.long(), mb.doc_ids)
            target = mb.target.long().flatten()
            nll += float(F.cross_entropy(logits.flatten(0, 1), target, ignore_index=-100, reduction="sum"))
            tokens += int((target != -100).sum())
        return EvalResult(nll, tokens, 0, len(ds))

    @torch.no_grad()
    def texts(self, texts: Sequence[str]) -> EvalResult:
        """Pseudo-log-likelihood: every token masked alone, in disjoint windows of the model's length."""
        nll, tokens, nbytes = 0.0, 0, 0
        for text in texts:
            ids = self.tok.encode(text).ids
            nbytes += len(text.encode("utf-8"))
            for start in range(0, len(ids), self.max_len):
                window = torch.tensor(ids[start : start + self.max_len], device=self.device)
                n = len(window)
                for lo in range(0, n, self.batch_size):
                    pos = torch.arange(lo, min(n, lo + self.batch_size), device=self.device)
                    rows = window.expand(len(pos), n).clone()
                    rows[torch.arange(len(pos)), pos] = self.mask_id
                    logp = F.log_softmax(self.model(rows)[torch.arange(len(pos)), pos], dim=-1)
                    nll -= float(logp.gather(1, window[pos][:, None]).sum())
                tokens += n
        return EvalResult(nll, tokens, nbytes, len(texts))

    def groups(self, groups: Mapping[str, Sequence[str]]) -> dict[str, EvalResult]:
        return {name: self.texts(texts) for name, texts in groups.items()}
