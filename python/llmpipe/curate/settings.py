"""The curate configuration: one YAML section per stage, plus read, tokenizer and pack."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from llmpipe.config import config_file, from_dict, load_yaml, to_dict
from llmpipe.curate.registry import STAGES, pipeline_columns
from llmpipe.errors import ConfigError
from llmpipe.io.config import ReadConfig


@dataclass
class TokenizerConfig:
    """YAML section ``tokenizer``: train a byte-level BPE on a sample of the kept text, or load a file."""

    file: str | None = None
    vocab_size: int = 32000
    pattern: str = "gpt2"
    min_frequency: int = 2
    #: UTF-8 bytes of kept text (taken in input order) to train on
    sample_bytes: int = 50_000_000
    #: special tokens reserved after <|endoftext|> (ids 1, 2, ...), recorded in the manifest: presets
    #: ``mlm`` (<mask>, <pad>) and ``t5`` (<pad>, <extra_id_0>..<extra_id_99>) or literal tokens
    #: (docs/tokenizer.md); a given tokenizer (``file``) must already hold them
    special_tokens: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from llmpipe.tokenizer import PATTERNS, expand_special_tokens

        try:
            expand_special_tokens(self.special_tokens)
        except ConfigError as e:
            raise ConfigError(f"tokenizer.special_tokens: {e}") from None
        if self.sample_bytes < 1:
            raise ValueError("tokenizer.sample_bytes must be positive")
        need = 257 + len(self.reserved())  # the 256 byte tokens, <|endoftext|>, the reserved tokens
        if self.vocab_size < need:
            raise ValueError(
                f"tokenizer.vocab_size {self.vocab_size} is too small: byte-level BPE needs at least {need} "
                f"(256 byte tokens + {need - 256} special token(s))"
            )
        if self.pattern not in PATTERNS:
            if re.fullmatch(r"[A-Za-z0-9_]+", self.pattern):  # meant as a name, not as a regex
                raise ValueError(
                    f"tokenizer.pattern: unknown name {self.pattern!r}; use one of {list(PATTERNS)} or a regex"
                )
            try:
                regex.compile(self.pattern)
            except regex.error as e:
                raise ValueError(f"tokenizer.pattern: not a valid regex ({e})") from None

    def reserved(self) -> list[str]:
        """The special tokens reserved after <|endoftext|>, presets expanded."""
        from llmpipe.tokenizer import expand_special_tokens

        return expand_special_tokens(self.special_tokens)

    def to_dict(self) -> dict[str, Any]:
        """The section as data; ``special_tokens`` only when set, so that a config without it hashes
        (and writes its manifest) as before the key existed."""
        out: dict[str, Any] = to_dict(self)
        if not self.special_tokens:
            del out["special_tokens"]
        return out


#: the longest ``pack.seq_len``: a sample is ``seq_len + 1`` tokens
MAX_SEQ_LEN = 1 << 20
#: the most tokens one shard holds (``samples_per_shard * (seq_len + 1)``): the packer holds a shard
#: of each split in memory before writing it (up to 16 GiB each at this size, uint32 ids)
MAX_SHARD_TOKENS = 1 << 32


@dataclass
class PackConfig:
    """YAML section ``pack``: sequence length and shard layout."""

    #: tokens per training sample, 2 to MAX_SEQ_LEN (1,048,576)
    seq_len: int = 1024
    #: samples per shard; ``samples_per_shard * (seq_len + 1)`` at most MAX_SHARD_TOKENS (2**32)
    samples_per_shard: int = 8192
    val_fraction: float = 0.01
    #: "concat" (one stream cut into samples, no padding but the last) or "best_fit" (documents
    #: split only when longer than a sample; rows padded with EOS)
    packing: str = "concat"
    #: best_fit only: how many samples' worth of documents are packed together, at least 1
    best_fit_window: int = 512

    def __post_init__(self) -> None:
        if self.packing not in ("concat", "best_fit"):
            raise ValueError(f"pack.packing must be 'concat' or 'best_fit', not {self.packing!r}")
        if self.best_fit_window < 1:
            raise ValueError(f"pack.best_fit_window must be at least 1 (samples), not {self.best_fit_window}")
        if self.seq_len < 2:
            raise ValueError("pack.seq_len must be at least 2")
        if self.seq_len > MAX_SEQ_LEN:
            raise ValueError(
                f"pack.seq_len {self.seq_len:,} is above the longest llmpipe packs, {MAX_SEQ_LEN:,}"
            )
        if self.samples_per_shard < 1:
            raise ValueError("pack.samples_per_shard must be at least 1")
        if self.samples_per_shard * (self.seq_len + 1) > MAX_SHARD_TOKENS:
            most = MAX_SHARD_TOKENS // (self.seq_len + 1)
            raise ValueError(
                f"pack.samples_per_shard {self.samples_per_shard:,} samples of seq_len {self.seq_len:,} + 1 "
                f"tokens are more than a shard holds in memory (2**32 tokens): set pack.samples_per_shard "
                f"to at most {most:,} in the --config"
            )
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError("pack.val_fraction must be in [0, 1)")


@dataclass
class CurateConfig:
    read: ReadConfig = field(default_factory=ReadConfig)
    stages: dict[str, Any] = field(default_factory=dict)  # stage name -> that stage's Config
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    pack: PackConfig = field(default_factory=PackConfig)

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str = "config") -> CurateConfig:
        by_name = {s.name: s for s in STAGES}
        known = {"read", "tokenizer", "pack", *by_name}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown section(s) {unknown}; known sections: {sorted(known)}")
        for key, value in data.items():
            if key not in by_name and value is not None and not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: expected a mapping of options")
        stages = {
            name: stage.parse_config(data.get(name), f"{where}.{name}") for name, stage in by_name.items()
        }
        taken = pipeline_columns()
        for model in stages["classifier"].models:
            if model.name in taken:
                raise ConfigError(
                    f"{where}.classifier: name {model.name!r} is a column the pipeline uses (the score would "
                    f"replace it); give the score a name of its own, not one of {sorted(taken)}"
                )
        return cls(
            read=from_dict(ReadConfig, data.get("read") or {}, f"{where}.read"),
            stages=stages,
            tokenizer=from_dict(TokenizerConfig, data.get("tokenizer") or {}, f"{where}.tokenizer"),
            pack=from_dict(PackConfig, data.get("pack") or {}, f"{where}.pack"),
        )

    @classmethod
    def load(cls, path: str | Path | None) -> CurateConfig:
        if path is None:
            return cls.from_mapping({})
        return cls.from_mapping(load_yaml(config_file(path, "curate")), str(path))

    def to_dict(self) -> dict[str, Any]:
        return {
            "read": to_dict(self.read),
            **{name: to_dict(c) for name, c in self.stages.items()},
            "tokenizer": self.tokenizer.to_dict(),
            "pack": to_dict(self.pack),
        }

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    def build_stages(self) -> list[Any]:
        """Instances of the enabled stages, in pipeline order."""
        out = []
        for stage_cls in STAGES:
            try:
                stage = stage_cls.from_config(self.stages[stage_cls.name])
            except ValueError as e:
                raise ConfigError(f"{stage_cls.name}: {e}") from e
            if stage is not None:
                out.append(stage)
        return out
