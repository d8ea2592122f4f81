"""Masked-LM batches for the encoder (``model.arch=encoder``), made on the fly from the same shards.

RoBERTa's dynamic masking: ``mlm.mask_prob`` of the tokens (never EOS, which also pads) are chosen; of
those ``mask_replace`` become ``<mask>``, ``random_replace`` a uniformly random token, the rest stay as
they are; the loss predicts the original token at the chosen positions only (target -100 elsewhere). With
``mlm.whole_word`` whole words are chosen (every token of a word, or none).

Every draw is a counter-based hash of (mlm.seed, optimizer step, the row's position in the step's global
batch, the token's position in its row): no generator state, so a resumed run draws the same masks as an
uninterrupted one, any layout (data-parallel ranks, accumulation) draws the same masks for the same
sample, and a sample met again in a later epoch (another step) gets new ones. Validation uses its own
stream keyed by batch index, so every evaluation of a run scores the same masks.

The ``<mask>`` token is the one the shards reserved (``llmpipe curate --special-tokens mlm``, recorded in
their manifest) or else the tokenizer's own when it has one; else it takes the first id the tokenizer does
not use and the model's vocabulary grows to hold it (``resolve_mask_token``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

from llmpipe.data import Batch
from llmpipe.errors import LlmpipeError
from llmpipe.train.config import MlmConfig, RunConfig

_M = 0xFFFFFFFF
_SELECT, _KIND, _RANDOM, _VAL = 0x1B873593, 0x2C1B3C6D, 0x297A2D39, 0x3C6EF372
#: the first character of a byte-level (GPT-2) or SentencePiece token that begins with whitespace
_WORD_START = ("Ġ", "Ċ", "ĉ", "č", "▁", " ", "\n", "\t")


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xorshift-multiply), in int64 so no product overflows; the same on any device."""
    x = x & _M
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M
    return x ^ (x >> 16)


def uniform(seed: int, salt: int, step: int, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """A value in [0, 1) for each (row, col) (broadcast), from the key alone (float64)."""
    h = _mix(torch.tensor((seed * 0x9E3779B1 + salt) & _M, dtype=torch.int64, device=rows.device))
    h = _mix(h ^ (step & _M))
    h = _mix(h ^ (step >> 32))
    return _mix(_mix(h ^ rows) ^ cols).double() / 2.0**32


def vocab_of(tokenizer_json: str) -> tuple[dict[str, int], dict[str, int]]:
    """(every token -> id, special tokens -> id) of a tokenizer.json."""
    tok = json.loads(tokenizer_json)
    vocab = dict(tok.get("model", {}).get("vocab", {}) or {})
    if isinstance(vocab, list):  # unigram: [[piece, score], ...]
        vocab = {piece: i for i, (piece, _) in enumerate(vocab)}
    added = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    specials = {t["content"]: t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    return {**vocab, **added}, specials


def resolve_mask_token(
    cfg: MlmConfig, tokenizer_file: Path, reserved: Mapping[str, int] | None = None
) -> int:
    """The id of ``cfg.mask_token``: the one the shards reserved (``reserved``, their manifest's), the
    tokenizer's, or else the first id the tokenizer does not use."""
    try:
        vocab, _ = vocab_of(tokenizer_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError, ValueError) as e:
        raise LlmpipeError(f"{tokenizer_file}: cannot read the tokenizer for the <mask> token ({e})") from e
    if reserved and cfg.mask_token in reserved and vocab.get(cfg.mask_token) != reserved[cfg.mask_token]:
        raise LlmpipeError(
            f"the shards' manifest reserves {cfg.mask_token} as id {reserved[cfg.mask_token]}, their "
            f"tokenizer {tokenizer_file} has it as {vocab.get(cfg.mask_token)}"
        )
    if cfg.mask_token in vocab:
        found = int(vocab[cfg.mask_token])
        if cfg.mask_token_id is not None and cfg.mask_token_id != found:
            raise LlmpipeError(
                f"mlm.mask_token_id {cfg.mask_token_id}: the tokenizer has {cfg.mask_token} as id {found}"
            )
        return found
    free = max(vocab.values(), default=-1) + 1
    if cfg.mask_token_id is not None and cfg.mask_token_id < free:
        raise LlmpipeError(
            f"mlm.mask_token_id {cfg.mask_token_id} is a token of the tokenizer (free ids from {free})"
        )
    return free if cfg.mask_token_id is None else cfg.mask_token_id


def word_starts(tokenizer_json: str, size: int) -> torch.Tensor:
    """[size] bool: True where a token begins a word (it begins with whitespace, or is special)."""
    vocab, specials = vocab_of(tokenizer_json)
    starts = torch.zeros(size, dtype=torch.bool)
    for piece, i in vocab.items():
        if 0 <= i < size and (piece.startswith(_WORD_START) or piece in specials):
            starts[i] = True
    return starts


class Masker:
    """Turns a loader batch (tokens) into a masked-LM batch: input with masks, target at the chosen
    positions. ``n_random``: random replacements are drawn from ids [random_from, n_random) (the shards'
    vocabulary, less the special tokens a curated tokenizer reserved at its first ids: ``random_from``)."""

    def __init__(
        self,
        cfg: MlmConfig,
        *,
        mask_id: int,
        eos_id: int,
        n_random: int,
        starts: torch.Tensor | None = None,  # word_starts(): needed for whole-word masking
        random_from: int = 0,
    ) -> None:
        if cfg.whole_word and starts is None:
            raise ValueError("whole-word masking needs the tokenizer's word starts")
        if not 0 <= random_from < n_random:
            raise ValueError(f"random replacements from ids [{random_from}, {n_random}): none")
        self.cfg, self.mask_id, self.eos_id, self.n_random = cfg, mask_id, eos_id, n_random
        self.random_from = random_from
        self.starts = starts

    def __call__(self, b: Batch, step: int, first_row: int) -> Batch:
        """Masks for training step ``step``; ``first_row``: the position of this batch's first row in
        the step's global batch (micro-batch k of rank r: k * global micro-batch + r * batch_size)."""
        return self.mask(b, step, first_row)

    def validation(self, b: Batch, index: int, first_row: int) -> Batch:
        """The fixed masks of validation batch ``index`` (the same at every evaluation)."""
        return self.mask(b, index, first_row, salt=_VAL)

    def mask(self, b: Batch, step: int, first_row: int, salt: int = 0) -> Batch:
        ids = b.input.long()
        n_rows, n = ids.shape
        rows = (first_row + torch.arange(n_rows, device=ids.device))[:, None]
        cols = torch.arange(n, device=ids.device)[None, :]
        cand = ids != self.eos_id
        c, seed = self.cfg, self.cfg.seed
        if c.whole_word:
            assert self.starts is not None
            starts = self.starts.to(ids.device)[ids.clamp(max=len(self.starts) - 1)] | ~cand
            prev_end = torch.ones_like(cand)
            prev_end[:, 1:] = ~cand[:, :-1]  # the first token after EOS (or the row's start) begins a word
            word = torch.where(starts | prev_end, cols, 0).cummax(dim=1).values  # where each word starts
            chosen = cand & (uniform(seed, _SELECT ^ salt, step, rows, word) < c.mask_prob)
        else:
            chosen = cand & (uniform(seed, _SELECT ^ salt, step, rows, cols) < c.mask_prob)
        kind = uniform(seed, _KIND ^ salt, step, rows, cols)
        span = self.n_random - self.random_from
        rand = self.random_from + (uniform(seed, _RANDOM ^ salt, step, rows, cols) * span).long()
        inp = torch.where(chosen & (kind < c.mask_replace), self.mask_id, ids)
        inp = torch.where(
            chosen & (kind >= c.mask_replace) & (kind < c.mask_replace + c.random_replace), rand, inp
        )
        target = torch.where(chosen, ids, -100)
        return Batch(inp.to(b.input.dtype), target, b.doc_ids)


def prepare(
    cfg: RunConfig,
    tokenizer_file: Path,
    n_tokens: int,
    eos_id: int,
    reserved: Mapping[str, int] | None = None,
) -> Masker | None:
    """The encoder's masker (None for other architectures): resolves and records ``mlm.mask_token_id``
    and grows ``model.vocab_size`` to hold it. ``n_tokens``: the shards' vocabulary size; ``reserved``:
    the special tokens their manifest records."""
    if cfg.model.arch != "encoder":
        return None
    mask_id = resolve_mask_token(cfg.mlm, tokenizer_file, reserved)
    cfg.mlm.mask_token_id = mask_id
    cfg.model.vocab_size = max(cfg.model.vocab_size or 0, n_tokens, mask_id + 1)
    starts = None
    if cfg.mlm.whole_word:
        starts = word_starts(tokenizer_file.read_text(encoding="utf-8"), cfg.model.vocab_size)
    low = random_from(reserved or {}, eos_id)
    return Masker(cfg.mlm, mask_id=mask_id, eos_id=eos_id, n_random=n_tokens, starts=starts, random_from=low)


def random_from(reserved: Mapping[str, int], eos_id: int) -> int:
    """The first id a random replacement may take: past the special tokens when they are the tokenizer's
    first ids (EOS and the tokens ``llmpipe curate --special-tokens`` reserved after it), so that no
    <mask>, <pad> or sentinel is drawn as a random token; else 0 (every id of the vocabulary)."""
    ids = {eos_id, *reserved.values()}
    return max(ids) + 1 if reserved and ids == set(range(max(ids) + 1)) else 0
