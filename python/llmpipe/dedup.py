"""Near-duplicate detection: MinHash signatures and LSH clustering, computed in Rust.

    >>> sigs = minhash_signatures(texts)             # (n, 112) uint32, word 5-grams, seed 1
    >>> clusters = near_duplicates(texts)            # cluster id of every document

Defaults follow FineWeb / datatrove: word 5-grams of lower-cased text without punctuation, 112
hashes in 14 bands of 8 rows. Signature values are ``uint32`` (half the memory of datasketch's
``uint64`` values, which only use 32 bits either way). A document with fewer words than ``ngram`` is
one shingle of all its words; an empty document has no shingles, its signature is all
``0xFFFFFFFF`` and it is never a near duplicate. See docs/dedup.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias

import numpy as np
import pyarrow as pa

from llmpipe import _core
from llmpipe.buffers import string_buffers
from llmpipe.errors import ConfigError

#: exact-Jaccard threshold of the verification of candidate pairs when no ``threshold`` is given
#: (the 14 x 8 S-curve has its midpoint at (1/14)^(1/8) = 0.72)
DEFAULT_VERIFY_THRESHOLD = 0.7

Texts: TypeAlias = Sequence[str] | pa.Array | pa.ChunkedArray


@dataclass(frozen=True)
class Shingling:
    """How texts become shingles and signatures (the arguments shared by every call)."""

    num_perm: int = 112
    ngram: int = 5
    seed: int = 1
    unit: Literal["words", "chars"] = "words"
    lowercase: bool = True
    strip_punctuation: bool = True
    nfc: bool = True

    def kwargs(self) -> dict[str, Any]:
        return asdict(self)

    def core(self) -> _core.Shingling:
        """The same parameters as the Rust object every call takes (checked there)."""
        return _core.Shingling(**asdict(self))


def lsh_shape(num_perm: int, bands: int, rows: int, threshold: float | None) -> tuple[int, int]:
    """Bands x rows: as given, or (with ``threshold``) the pair minimising weighted FP + FN area."""
    if threshold is not None:
        if not 0.0 < threshold < 1.0:
            raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
        return _core.lsh_optimal_param(threshold, num_perm)
    if bands < 1 or rows < 1 or bands * rows > num_perm:
        raise ConfigError(
            f"bands x rows = {bands} x {rows} must be at least 1 and at most num_perm={num_perm}"
        )
    return bands, rows


def minhash_signatures(
    texts: Texts,
    num_perm: int = 112,
    ngram: int = 5,
    seed: int = 1,
    *,
    unit: Literal["words", "chars"] = "words",
    lowercase: bool = True,
    strip_punctuation: bool = True,
    nfc: bool = True,
) -> np.ndarray:
    """MinHash signatures, shape ``(len(texts), num_perm)``, dtype ``uint32``: one Rust call."""
    offsets, data = string_buffers(texts)
    sh = Shingling(num_perm, ngram, seed, unit, lowercase, strip_punctuation, nfc)
    raw = _core.minhash_signatures(offsets, data, sh.core())
    return np.frombuffer(raw, dtype=np.uint32).reshape(len(offsets) - 1, num_perm)


def near_duplicates(
    texts_or_signatures: Texts | np.ndarray,
    *,
    num_perm: int = 112,
    bands: int = 14,
    rows: int = 8,
    threshold: float | None = None,
    ngram: int = 5,
    seed: int = 1,
    unit: Literal["words", "chars"] = "words",
    lowercase: bool = True,
    strip_punctuation: bool = True,
    nfc: bool = True,
    verify: bool | None = None,
    verify_threshold: float | None = None,
) -> np.ndarray:
    """Cluster id of every document (int64): the position of the first document of its cluster.

    Documents sharing an LSH bucket are candidates; with ``verify`` (the default for texts) a
    candidate pair is merged only if the exact Jaccard similarity of the shingle sets reaches
    ``verify_threshold`` (default: ``threshold`` if given, else 0.7). ``threshold`` also picks
    bands x rows (overriding ``bands`` and ``rows``). A 2-D ``uint32`` array is taken as
    signatures (``num_perm`` is its width); signatures cannot be verified.
    """
    if isinstance(texts_or_signatures, np.ndarray):
        sigs = texts_or_signatures
        if sigs.ndim != 2 or sigs.dtype != np.uint32:
            raise ConfigError(f"signatures must be a 2-D uint32 array, got {sigs.dtype} {sigs.shape}")
        if verify:
            raise ConfigError("verify=True needs the texts: signatures carry no shingle sets")
        num_perm = sigs.shape[1]
        b, r = lsh_shape(num_perm, bands, rows, threshold)
        roots = _core.cluster_signatures(np.ascontiguousarray(sigs), num_perm, b, r, seed, None)
        return np.frombuffer(roots, dtype=np.uint32).astype(np.int64)
    verify = True if verify is None else verify
    vt = verify_threshold if verify_threshold is not None else threshold or DEFAULT_VERIFY_THRESHOLD
    b, r = lsh_shape(num_perm, bands, rows, threshold)
    offsets, data = string_buffers(texts_or_signatures)
    sh = Shingling(num_perm, ngram, seed, unit, lowercase, strip_punctuation, nfc)
    roots = _core.cluster_texts(offsets, data, sh.core(), b, r, vt if verify else None)
    return np.frombuffer(roots, dtype=np.uint32).astype(np.int64)
