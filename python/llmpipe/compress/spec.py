"""What to quantize and how: the method, its group size, and the checks that make a bad request one line."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from llmpipe.compress.names import BITS, DEFAULT_GROUP, METHODS, Method
from llmpipe.errors import ConfigError


@dataclass(frozen=True)
class QuantSpec:
    method: Method
    group_size: int = DEFAULT_GROUP  # 4-bit methods: weights per scale along the input dimension

    @property
    def bits(self) -> int:
        return BITS[self.method]

    @property
    def grouped(self) -> bool:
        return self.bits == 4


def targets(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules quantized: every Linear (attention, MLP, output head) and the token embedding.
    Norm weights stay fp32 (a few hundred numbers per layer)."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Embedding)]


def check(spec: QuantSpec, model: nn.Module) -> None:
    if spec.method not in METHODS:
        raise ConfigError(f"unknown method {spec.method!r}; choose from {', '.join(METHODS)}")
    if not spec.grouped:
        return
    if spec.group_size <= 0:
        raise ConfigError(f"--group-size must be positive, got {spec.group_size}")
    for name, m in targets(model):
        width = int(m.in_features if isinstance(m, nn.Linear) else m.embedding_dim)  # type: ignore[arg-type]
        if width % spec.group_size:
            raise ConfigError(
                f"--group-size {spec.group_size} does not divide the input width {width} of {name}; "
                f"pick a divisor of {width}"
            )
