"""T5's length arithmetic for span corruption, without torch (``llmpipe plan`` uses it too; the
corruption itself is train/span_corruption.py)."""

from __future__ import annotations

from dataclasses import dataclass

from llmpipe.errors import ConfigError


@dataclass(frozen=True)
class SpanLengths:
    """T5's arithmetic for a row of ``raw`` tokens."""

    raw: int
    noise: int
    spans: int

    @property
    def inputs(self) -> int:
        return self.raw - self.noise + self.spans + 1  # + EOS

    @property
    def targets(self) -> int:
        return self.noise + self.spans + 1  # + EOS


def span_lengths(raw: int, noise_density: float, mean_span_length: float) -> SpanLengths:
    """Noise tokens and spans in a row of ``raw`` tokens, as ``random_spans_noise_mask`` counts them."""
    if raw < 2:
        raise ConfigError(f"span corruption needs rows of at least 2 tokens, not {raw}")
    noise = min(max(int(round(raw * noise_density)), 1), raw - 1)
    spans = max(int(round(noise / mean_span_length)), 1)
    spans = min(spans, noise, raw - noise)  # each span (and each gap before one) holds a token
    return SpanLengths(raw, noise, spans)


def raw_length_for(inputs_length: int, noise_density: float, mean_span_length: float) -> int:
    """T5's ``compute_input_and_target_lengths``: the longest raw row whose corrupted encoder input
    (EOS included) fits ``inputs_length`` tokens."""
    raw = inputs_length
    while span_lengths(raw + 1, noise_density, mean_span_length).inputs <= inputs_length:
        raw += 1
    return raw
