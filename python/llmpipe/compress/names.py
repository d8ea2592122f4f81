"""The names of the compression methods, without importing torch: the CLI builds its choices from
these, and `llmpipe --help` must not pay for torch."""

from __future__ import annotations

from typing import Literal, get_args

Method = Literal["int8", "int8-dynamic", "int4", "nf4", "gptq-int4"]
METHODS: tuple[str, ...] = get_args(Method)
BITS = {"int8": 8, "int8-dynamic": 8, "int4": 4, "nf4": 4, "gptq-int4": 4}
DEFAULT_GROUP = 64

# where `llmpipe quantize` writes: compressed-tensors (transformers, vLLM; int8, int4, gptq-int4), GGUF
# (llama.cpp; f16, q8_0, q4_0, with int8/int4 meaning q8_0/q4_0) or llmpipe's own format (every method)
Format = Literal["compressed-tensors", "gguf", "llmpipe"]
FORMATS: tuple[str, ...] = get_args(Format)
GGUF_METHODS: tuple[str, ...] = ("f16", "q8_0", "q4_0")

PruneMethod = Literal["magnitude", "wanda"]
Structure = Literal["unstructured", "2:4", "neurons"]
PRUNE_METHODS: tuple[str, ...] = get_args(PruneMethod)
STRUCTURES: tuple[str, ...] = get_args(Structure)
