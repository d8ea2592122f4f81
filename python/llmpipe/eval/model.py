"""A causal LM as the evaluator sees it: a forward function, a tokenizer, the prefix token and a length.

``load_lm(path)`` opens a run directory of the trainer (its latest checkpoint, the shards'
tokenizer) or any local HuggingFace causal LM directory; ``wrap_lm(model, tokenizer)`` adapts a model
already in memory (a transformers ``PreTrainedModel`` or the trainer's ``Transformer``).
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmpipe.errors import ConfigError, InputError
from llmpipe.eval.score import Forward

Encode = Callable[[Sequence[str]], list[list[int]]]


@dataclass
class LM:
    forward: Forward
    encode: Encode  # texts -> token ids, no special tokens added
    prefix_id: int  # the token every document is scored after
    max_len: int  # the longest input the model takes
    vocab_size: int
    device: torch.device
    byte_lengths: np.ndarray | None = None  # UTF-8 bytes of each id (0 for special tokens)
    name: str = "model"
    tokenizer_json: str | None = None  # the tokenizer.json text (a ``tokenizers`` one): shards are checked


def default_device(device: str | torch.device | None, option: str = "device") -> torch.device:
    """The device named (None or ``auto``: cuda when there is one); a name torch does not know, or a
    CUDA device this machine does not have, is a ConfigError (one line naming ``option``)."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"{option} {device!r}: not a device (cpu, cuda, cuda:1 ...)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"{option} {device}: CUDA is not available on this machine (no GPU, or no driver); "
                f"use {option} cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(
                f"{option} {device}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    return dev


def _dtype(name: str | torch.dtype | None) -> torch.dtype:
    if name is None:
        return torch.float32
    if isinstance(name, torch.dtype):
        return name
    table = {
        "fp32": torch.float32,
        "float32": torch.float32,
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
    }
    table |= {"fp16": torch.float16, "float16": torch.float16}
    if name not in table:
        raise ConfigError(f"dtype {name!r}: expected one of {sorted(table)}")
    return table[name]


def _byte_unicode() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2): character -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def byte_lengths(tok: Any, vocab_size: int) -> np.ndarray:
    """UTF-8 bytes spelled by each id of a ``tokenizers.Tokenizer`` (byte-level BPE; special tokens 0)."""
    alphabet = _byte_unicode()
    special = {t["id"] for t in json.loads(tok.to_str()).get("added_tokens", []) if t.get("special")}
    out = np.zeros(vocab_size, dtype=np.int64)
    for token, i in tok.get_vocab(with_added_tokens=True).items():
        if i >= vocab_size or i in special:
            continue
        out[i] = len(token) if all(c in alphabet for c in token) else len(token.encode("utf-8"))
    return out


def _hf_tokenizer_encode(tok: Any) -> Encode:
    if hasattr(tok, "encode_batch") and hasattr(tok, "get_vocab") and not hasattr(tok, "batch_decode"):
        if hasattr(tok, "to_str"):  # tokenizers.Tokenizer
            return lambda texts: [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]
        return lambda texts: tok.encode_batch(list(texts))  # llmpipe.tokenizer.Tokenizer
    if callable(tok):  # transformers tokenizer
        return lambda texts: list(tok(list(texts), add_special_tokens=False, verbose=False)["input_ids"])
    raise ConfigError(
        f"cannot encode with a {type(tok).__name__}; pass a transformers or tokenizers tokenizer"
    )


def _hf_forward(model: Any) -> Forward:
    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, attention_mask=mask).logits

    return forward


def _trainer_forward(model: Any) -> Forward:
    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model(ids)  # causal: right padding never reaches the real positions

    return forward


def wrap_lm(
    model: Any,
    tokenizer: Any,
    *,
    prefix_id: int | None = None,
    max_len: int | None = None,
    device: str | torch.device | None = None,
    name: str = "model",
) -> LM:
    """An in-memory model: a transformers causal LM or the trainer's ``Transformer``, with its tokenizer
    (transformers, ``tokenizers`` or llmpipe). The model is used where it is unless ``device`` is given."""
    dev = next(model.parameters()).device if device is None else default_device(device)
    model.to(dev).eval()
    is_hf = hasattr(model, "config") and hasattr(model, "generate")
    if is_hf:
        vocab = int(model.config.vocab_size)
        limit = getattr(model.config, "max_position_embeddings", None) or getattr(
            model.config, "n_positions", None
        )
    else:
        vocab = int(model.cfg.vocab_size)
        limit = model.cfg.max_seq_len
    if prefix_id is None:
        prefix_id = _prefix_of(tokenizer)
        if prefix_id is None and is_hf:
            prefix_id = (
                model.config.bos_token_id
                if model.config.bos_token_id is not None
                else model.config.eos_token_id
            )
    if prefix_id is None:
        raise ConfigError(
            "the tokenizer has no BOS or EOS token to score the first token after; pass prefix_id"
        )
    max_len = max_len or limit
    if not max_len:
        raise ConfigError("the model does not say how long an input may be; pass max_len")
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    lengths = byte_lengths(backend, vocab) if hasattr(backend, "to_str") else None
    fwd = _hf_forward(model) if is_hf else _trainer_forward(model)
    text = backend.to_str() if hasattr(backend, "to_str") else None
    return LM(
        fwd, _hf_tokenizer_encode(tokenizer), int(prefix_id), int(max_len), vocab, dev, lengths, name, text
    )


def _prefix_of(tok: Any) -> int | None:
    """lm-eval's choice: the BOS id, else the EOS id; for a ``tokenizers`` one, ``<|endoftext|>``."""
    for attr in ("bos_token_id", "eos_token_id"):
        value = getattr(tok, attr, None)
        if isinstance(value, int):
            return value
    if hasattr(tok, "eos_id"):  # llmpipe tokenizer
        return int(tok.eos_id)
    if hasattr(tok, "token_to_id"):
        found = tok.token_to_id("<|endoftext|>")
        return int(found) if found is not None else None
    return None


def load_lm(
    path: str | Path, *, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None
) -> LM:
    """A run directory (latest checkpoint, the shards' tokenizer and EOS) or a local HF causal LM directory."""
    path = Path(path)
    dev = default_device(device)
    if (path / "config.yaml").is_file() and (path / "checkpoints").is_dir():
        return _load_run(path, dev, _dtype(dtype))
    if (path / "config.json").is_file():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from llmpipe.quiet import quiet_imports
        from llmpipe.train.export_hf import read_tokenizer

        if (path / "tokenizer.json").is_file():  # transformers reads a damaged one with any error
            read_tokenizer(path / "tokenizer.json", "the model directory's tokenizer is damaged")
        try:
            # never the directory's own code (auto_map): without False transformers asks on the terminal
            tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
            with quiet_imports():  # transformers' quantizers import torchao, which logs deprecations
                model = AutoModelForCausalLM.from_pretrained(
                    path, dtype=_dtype(dtype), trust_remote_code=False
                )
        except (OSError, ValueError) as e:
            raise _hf_load_error(path, e) from None
        return wrap_lm(model, tok, device=dev, name=str(path))
    raise InputError(
        f"{path}: neither a training run (config.yaml, checkpoints/) nor a HF model (config.json)"
    )


def _hf_load_error(path: Path, e: BaseException) -> BaseException:
    """What transformers raised while loading ``path``, in one line: a weights file that is a pickle
    naming anything but tensors (torch loads ``*.bin`` with ``weights_only=True``) is refused; another
    file it cannot read is an input error. An OS error of the machine (disk full...) is kept as it is."""
    chain: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for c in chain:
        if isinstance(c, pickle.UnpicklingError):
            found = re.search(r"GLOBAL (\S+)", str(c))
            names = f"it names {found.group(1)}" if found else "it is not plain tensors"
            bins = ", ".join(sorted(f.name for f in path.glob("*.bin"))) or "a weights file"
            return InputError(f"{path}: refused: {bins}: {names}, a pickle that could run code")
    if "trust_remote_code" in str(e):
        return InputError(
            f"{path}: the model asks to run its own code (auto_map); llmpipe never runs code from a model directory"
        )
    if isinstance(e, OSError) and e.errno is not None:
        return e
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
    return InputError(f"{path}: not a model transformers can load ({first})")


def _load_run(path: Path, dev: torch.device, dtype: torch.dtype) -> LM:
    from tokenizers import Tokenizer

    from llmpipe.data.format import MANIFEST, TOKENIZER_FILE, read_manifest
    from llmpipe.train.export_hf import load_run

    cfg, model, _ = load_run(path)
    shards = cfg.data.path if cfg.data.path is not None else cfg.data.sources[0].path
    if shards is None or not (shards / TOKENIZER_FILE).is_file():
        raise InputError(
            f"{path}: no tokenizer at {shards}/{TOKENIZER_FILE} (the shards this run trained on); "
            "evaluate its HF export instead"
        )
    tok = Tokenizer.from_file(str(shards / TOKENIZER_FILE))
    eos = None
    if (shards / MANIFEST).is_file():
        eos = read_manifest(shards)["tokenizer"]["eos_id"]
    return wrap_lm(model.to(dtype), tok, prefix_id=eos, device=dev, name=str(path))
