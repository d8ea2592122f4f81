"""Byte-level BPE tokenizer (Rust core, HF ``tokenizer.json`` compatible).

    tok = Tokenizer.train(["corpus.txt"], 32000, pattern="gpt2")
    tok.save("tokenizer.json")          # loads in tokenizers.Tokenizer.from_file, same ids
    ids = tok.encode("Hello world")
    flat, offsets = tok.encode_batch_arrays(texts)   # one Rust call, GIL released, all cores

Special tokens are recognised in text only when asked for (``allowed_special="all"`` or a set of
names); by default a literal ``<|endoftext|>`` in text is ordinary text. Python strings holding lone
surrogates (``"\\ud800"``) cannot be UTF-8; they are encoded as if each unpaired surrogate were
U+FFFD (a valid surrogate pair becomes its character), never an exception.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

import llmpipe._core as _core
from llmpipe.errors import ConfigError, InputError, TokenizerError
from llmpipe.io.fs import not_a_file

if TYPE_CHECKING:
    import pyarrow as pa

PATTERNS = ("gpt2", "cl100k", "o200k")
EOS = "<|endoftext|>"
MASK = "<mask>"  # the encoder's masked-LM token (train/mlm.py)
PAD = "<pad>"  # T5's pad and decoder start token (train/span_corruption.py)
#: sentinels a ``t5`` preset reserves (T5's tokenizer has 100)
T5_SENTINELS = 100


def sentinel_token(k: int) -> str:
    """T5's k-th span-corruption sentinel."""
    return f"<extra_id_{k}>"


#: ``--special-tokens`` / ``tokenizer.special_tokens`` presets
SPECIAL_PRESETS: dict[str, tuple[str, ...]] = {
    "mlm": (MASK, PAD),
    "t5": (PAD, *(sentinel_token(k) for k in range(T5_SENTINELS))),
}


def expand_special_tokens(items: Sequence[str]) -> list[str]:
    """The special tokens that ``items`` name, in order, each once: a preset (``mlm``: ``<mask>`` and
    ``<pad>``; ``t5``: ``<pad>`` and ``<extra_id_0>`` .. ``<extra_id_99>``) or a literal token, which
    must hold a character other than a letter, digit or ``_`` (``<cls>``, ``[SEP]``) so that a mistyped
    preset name is refused instead of becoming a token. ``<|endoftext|>`` is always the first special
    token and is not named here."""
    out: list[str] = []
    for item in items:
        if item in SPECIAL_PRESETS:
            names: Sequence[str] = SPECIAL_PRESETS[item]
        elif item == EOS:
            raise ConfigError(f"special token {EOS}: it is always there (the first id), do not name it")
        else:
            check_literal_special(item, f"not a preset ({', '.join(SPECIAL_PRESETS)}); a literal token")
            names = (item,)
        out += [n for n in names if n not in out]
    return out


def check_literal_special(token: str, what: str = "ordinary text; a special token") -> None:
    """A literal special token is not empty, holds no whitespace, and holds a character other than a
    letter, digit or ``_`` (``<cls>``, ``[SEP]``): a plain word would be taken out of ordinary text
    (and a mistyped preset name would become a token). ``what`` begins the reason of the error."""
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"special token {token!r}: empty or holds whitespace")
    if token.replace("_", "").isalnum():
        raise ConfigError(
            f"special token {token!r}: {what} holds a character other than letters, digits and _, "
            "such as <cls> or [SEP]"
        )


AllowedSpecial = Literal["all"] | Iterable[str] | None


def _clean(text: str) -> str:
    """Make ``text`` encodable as UTF-8: pair surrogates into characters, unpaired ones to U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _has_surrogates(texts: Sequence[str]) -> bool:
    for t in texts:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


class Tokenizer:
    """A byte-level BPE tokenizer; create with :meth:`train`, :meth:`from_file` or :meth:`from_tiktoken`."""

    def __init__(self, core: _core.BpeTokenizer) -> None:
        self._core = core
        self._names = {name for name, _ in core.special_tokens}

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        files: Sequence[str | os.PathLike[str]],
        vocab_size: int,
        *,
        pattern: str = "gpt2",
        min_frequency: int = 2,
        max_token_length: int | None = None,
        special_tokens: Sequence[str] = (EOS,),
    ) -> Tokenizer:
        """Train on text files, streamed line by line in parallel (never all in memory).

        ``pattern`` is ``gpt2``, ``cl100k``, ``o200k`` or a regex. Special tokens take the first ids.
        """
        _check_train_args(vocab_size, min_frequency, max_token_length, special_tokens)
        paths = [str(f) for f in files]
        for p in paths:
            if not Path(p).is_file():
                raise InputError(f"{p}: no such file")
        core = _core.BpeTokenizer.train(
            paths, vocab_size, pattern, min_frequency, max_token_length, list(special_tokens)
        )
        return cls(core)

    @classmethod
    def train_from_texts(
        cls,
        texts: Sequence[str],
        vocab_size: int,
        *,
        pattern: str = "gpt2",
        min_frequency: int = 2,
        max_token_length: int | None = None,
        special_tokens: Sequence[str] = (EOS,),
    ) -> Tokenizer:
        """Train on in-memory texts (each is split into lines, like a file)."""
        _check_train_args(vocab_size, min_frequency, max_token_length, special_tokens)
        texts = [_clean(t) for t in texts] if _has_surrogates(texts) else list(texts)
        core = _core.BpeTokenizer.train_texts(
            texts, vocab_size, pattern, min_frequency, max_token_length, list(special_tokens)
        )
        return cls(core)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load an HF ``tokenizer.json`` (byte-level BPE, written by llmpipe or by HF tokenizers)."""
        if why := not_a_file(path):
            raise InputError(
                f"{path}: {why}" if why != "does not exist" else f"{path}: no such tokenizer file"
            )
        return cls(_core.BpeTokenizer.from_file(str(path)))

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        pattern: str,
        special_tokens: dict[str, int] | None = None,
    ) -> Tokenizer:
        """Load a tiktoken rank file (``base64(token) rank`` per line) with a pattern name or regex.

        Without ``special_tokens``, ``<|endoftext|>`` gets the id after the highest rank.
        """
        if not Path(path).is_file():
            raise InputError(f"{path}: no such rank file")
        if special_tokens is None:
            with open(path, encoding="ascii") as f:
                top = max((int(line.split()[1]) for line in f if line.strip()), default=-1)
            special_tokens = {EOS: top + 1}
        core = _core.BpeTokenizer.from_tiktoken(str(path), pattern, sorted(special_tokens.items()))
        return cls(core)

    # -- saving ---------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write an HF ``tokenizer.json``."""
        self._core.save(str(path))

    def to_json(self) -> str:
        return self._core.to_json()

    def save_tiktoken(self, path: str | os.PathLike[str]) -> None:
        """Write the ordinary tokens as a tiktoken rank file (rank = id)."""
        Path(path).write_text(self._core.to_tiktoken(), encoding="ascii")

    # -- properties -----------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids (highest id + 1), special tokens included."""
        return self._core.vocab_size

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._core.special_tokens)

    @property
    def eos_id(self) -> int:
        """The id of ``<|endoftext|>`` (or of the only special token)."""
        specials = self.special_tokens
        if EOS in specials:
            return specials[EOS]
        if len(specials) == 1:
            return next(iter(specials.values()))
        raise TokenizerError(f"the tokenizer has no {EOS} token (special tokens: {sorted(specials)})")

    @property
    def pattern(self) -> str:
        return self._core.pattern

    def token_to_id(self, token: str) -> int | None:
        return self._core.token_to_id(token)

    def id_to_bytes(self, token_id: int) -> bytes | None:
        return self._core.id_to_bytes(token_id)

    def pre_tokenize(self, text: str) -> list[str]:
        return self._core.pre_tokenize(_clean(text))

    # -- encoding -------------------------------------------------------------------------------

    def _allowed(self, allowed_special: AllowedSpecial) -> list[str] | None:
        if allowed_special is None:
            return None
        if allowed_special == "all":
            return sorted(self._names)
        names = [allowed_special] if isinstance(allowed_special, str) else list(allowed_special)
        unknown = sorted(set(names) - self._names)
        if unknown:
            raise TokenizerError(f"not special tokens of this tokenizer: {unknown}")
        return names

    def encode(self, text: str, *, allowed_special: AllowedSpecial = None) -> list[int]:
        """Token ids of ``text``; special tokens only where ``allowed_special`` says."""
        allowed = self._allowed(allowed_special)
        try:
            return self._core.encode(text, allowed)
        except UnicodeEncodeError:
            return self._core.encode(_clean(text), allowed)

    def encode_batch(
        self, texts: Sequence[str], *, allowed_special: AllowedSpecial = None
    ) -> list[list[int]]:
        """Token ids of many texts: one Rust call, GIL released, all cores."""
        allowed = self._allowed(allowed_special)
        try:
            return self._core.encode_batch(list(texts), allowed)
        except UnicodeEncodeError:
            return self._core.encode_batch([_clean(t) for t in texts], allowed)

    def clear_cache(self) -> None:
        """Free the piece caches that encode calls keep (per thread) to reuse in the next calls."""
        self._core.clear_cache()

    def encode_column(
        self, column: pa.Array | pa.ChunkedArray, *, allowed_special: AllowedSpecial = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode_batch_arrays` of an Arrow string column, read in place by Rust (no Python
        string per text); nulls encode as empty texts."""
        from llmpipe.buffers import string_buffers

        offsets, data = string_buffers(column)
        ids, offs = self._core.encode_arrow_flat(offsets, data, self._allowed(allowed_special))
        return np.frombuffer(ids, dtype="<u4"), np.frombuffer(offs, dtype="<i8")

    def encode_batch_arrays(
        self, texts: Sequence[str], *, allowed_special: AllowedSpecial = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, offsets)``: all ids as one uint32 array and ``len(texts) + 1`` int64 offsets.

        Text ``i`` is ``ids[offsets[i]:offsets[i + 1]]``. One Rust call, GIL released, all cores.
        """
        allowed = self._allowed(allowed_special)
        texts = list(texts)
        try:
            ids, offs = self._core.encode_batch_flat(texts, allowed)
        except UnicodeEncodeError:
            ids, offs = self._core.encode_batch_flat([_clean(t) for t in texts], allowed)
        return np.frombuffer(ids, dtype="<u4"), np.frombuffer(offs, dtype="<i8")

    # -- decoding -------------------------------------------------------------------------------

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; bytes that are not valid UTF-8 (a cut character) become U+FFFD."""
        return self._core.decode(_ids(ids), skip_special_tokens)

    def decode_bytes(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> bytes:
        return self._core.decode_bytes(_ids(ids), skip_special_tokens)

    def decode_batch(self, seqs: Sequence[Iterable[int]], *, skip_special_tokens: bool = False) -> list[str]:
        return self._core.decode_batch([_ids(s) for s in seqs], skip_special_tokens)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, special_tokens={self.special_tokens})"


def _ids(ids: Iterable[int]) -> list[int]:
    if isinstance(ids, np.ndarray):
        return ids.astype(np.int64, copy=False).tolist()
    return list(ids)


class DocumentCounts:
    """Word counts for :meth:`DocumentCounts.train`, fed an Arrow string column of documents at a time:
    the same tokenizer as :meth:`Tokenizer.train` on a file holding those documents in order, each
    followed by a newline, without writing that file. Each call counts in Rust, GIL released."""

    def __init__(self, pattern: str = "gpt2") -> None:
        self._core = _core.BpeWordCounts(pattern)

    def add(self, offsets: np.ndarray, data: np.ndarray) -> None:
        """Count the documents of a string column given as int64 offsets and its data buffer."""
        self._core.add_documents(np.ascontiguousarray(offsets, dtype=np.int64), data)

    @property
    def bytes(self) -> int:
        """Bytes counted: the documents' UTF-8 and a newline each."""
        return int(self._core.bytes)

    def train(
        self,
        vocab_size: int,
        *,
        min_frequency: int = 2,
        max_token_length: int | None = None,
        special_tokens: Sequence[str] = (EOS,),
    ) -> Tokenizer:
        """Train on the words counted so far (they are used up)."""
        _check_train_args(vocab_size, min_frequency, max_token_length, special_tokens)
        return Tokenizer(self._core.train(vocab_size, min_frequency, max_token_length, list(special_tokens)))


def _check_train_args(
    vocab_size: int, min_frequency: int, max_token_length: int | None, special_tokens: Sequence[str]
) -> None:
    for token in special_tokens:
        check_literal_special(token)
    twice = sorted({t for t in special_tokens if list(special_tokens).count(t) > 1})
    if twice:
        raise ConfigError(f"special token(s) {twice} named more than once: each takes one id")
    if vocab_size < 256 + len(special_tokens):
        raise ConfigError(
            f"vocab_size {vocab_size} is too small: byte-level BPE needs 256 byte tokens "
            f"+ {len(special_tokens)} special token(s)"
        )
    if min_frequency < 0:
        raise ConfigError(f"min_frequency must be >= 0, got {min_frequency}")
    if max_token_length is not None and max_token_length < 2:
        raise ConfigError(f"max_token_length must be >= 2, got {max_token_length}")
