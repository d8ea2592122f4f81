"""Type stubs for the compiled extension llmpipe._core (hand-written; each area adds its section)."""

from collections.abc import Sequence
from os import PathLike
from typing import TypeAlias, final

#: A batch of texts: a list of str, or an Arrow string column as ``(int64 offsets, uint8 data)``
#: buffers (numpy arrays, Arrow buffers), read in place without a Python string per document.
_Texts: TypeAlias = Sequence[str] | tuple[object, object]

__version__: str

@final
class IdBuffer:
    """Owned integers exported through the buffer protocol (``numpy.frombuffer(buf, buf.dtype)``)."""

    @property
    def dtype(self) -> str: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int) -> memoryview: ...

# -- tokenizer (crates/llmpipe-bpe, crates/llmpipe-py/src/bpe.rs) --------------------------------

@final
class BpeTokenizer:
    @staticmethod
    def train(
        files: Sequence[str | PathLike[str]],
        vocab_size: int,
        pattern: str = "gpt2",
        min_frequency: int = 2,
        max_token_length: int | None = None,
        special_tokens: list[str] = ...,
    ) -> BpeTokenizer: ...
    @staticmethod
    def train_texts(
        texts: list[str],
        vocab_size: int,
        pattern: str = "gpt2",
        min_frequency: int = 2,
        max_token_length: int | None = None,
        special_tokens: list[str] = ...,
    ) -> BpeTokenizer: ...
    @staticmethod
    def from_file(path: str | PathLike[str]) -> BpeTokenizer: ...
    @staticmethod
    def from_json(text: str) -> BpeTokenizer: ...
    @staticmethod
    def from_tiktoken(
        path: str | PathLike[str], pattern: str, special_tokens: list[tuple[str, int]]
    ) -> BpeTokenizer: ...
    def save(self, path: str | PathLike[str]) -> None: ...
    def to_json(self) -> str: ...
    def to_tiktoken(self) -> str: ...
    def encode(self, text: str, allowed_special: list[str] | None = None) -> list[int]: ...
    def encode_batch(self, texts: list[str], allowed_special: list[str] | None = None) -> list[list[int]]: ...
    def encode_batch_flat(
        self, texts: list[str], allowed_special: list[str] | None = None
    ) -> tuple[bytes, bytes]: ...
    def encode_arrow_flat(
        self, offsets: object, data: object, allowed_special: list[str] | None = None
    ) -> tuple[bytes, bytes]: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...
    def decode_bytes(self, ids: list[int], skip_special_tokens: bool = False) -> bytes: ...
    def decode_batch(self, seqs: list[list[int]], skip_special_tokens: bool = False) -> list[str]: ...
    def clear_cache(self) -> None: ...
    def pre_tokenize(self, text: str) -> list[str]: ...
    def pre_tokenize_regex(self, text: str) -> list[str]:
        """The regex engine's pieces (the reference the hand-written pre-tokenizers are tested against)."""
    def token_to_id(self, token: str) -> int | None: ...
    def id_to_bytes(self, id: int) -> bytes | None: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def special_tokens(self) -> list[tuple[str, int]]: ...
    @property
    def pattern(self) -> str: ...

@final
class BpeWordCounts:
    """Word counts for training, fed string columns (int64 offsets, uint8 data) of documents."""
    def __new__(cls, pattern: str = "gpt2") -> BpeWordCounts: ...
    def add_documents(self, offsets: object, data: object) -> None: ...
    @property
    def bytes(self) -> int: ...
    def train(
        self,
        vocab_size: int,
        min_frequency: int = 2,
        max_token_length: int | None = None,
        special_tokens: list[str] = ...,
    ) -> BpeTokenizer: ...

# -- near dedup (crates/llmpipe-dedup, crates/llmpipe-py/src/dedup.rs) ---------------------------
# String columns arrive as int64 offsets + uint8 data buffers; results are little-endian bytes
# (np.frombuffer): signatures uint32, band keys uint64, counts uint32, group offsets uint64.
# Parameters typed `object` take any C-contiguous buffer (numpy array, Arrow buffer) of the dtype named.

@final
class Shingling:
    def __new__(
        cls,
        num_perm: int = 112,
        ngram: int = 5,
        seed: int = 1,
        unit: str = "words",
        lowercase: bool = True,
        strip_punctuation: bool = True,
        nfc: bool = True,
    ) -> Shingling: ...

def minhash_signatures(offsets: object, data: object, shingling: Shingling) -> bytes: ...
def minhash_sketch(
    offsets: object,
    data: object,
    shingling: Shingling,
    bands: int = 14,
    rows: int = 8,
    keep_shingles: bool = True,
) -> tuple[bytes, bytes, bytes, bytes]: ...
def id_hashes(offsets: object, data: object) -> bytes: ...
def lsh_groups(buckets: object, order: object, docs: object) -> tuple[bytes, bytes]: ...
def group_edges(
    offsets: object, members: object, store: ShingleStore | None = None, threshold: float = 0.7
) -> tuple[bytes, bytes]: ...
def cluster_signatures(
    signatures: object,
    num_perm: int,
    bands: int = 14,
    rows: int = 8,
    seed: int = 1,
    store: ShingleStore | None = None,
    threshold: float = 0.7,
) -> bytes: ...
def cluster_texts(
    offsets: object,
    data: object,
    shingling: Shingling,
    bands: int = 14,
    rows: int = 8,
    verify_threshold: float | None = None,
) -> bytes: ...
def lsh_optimal_param(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5
) -> tuple[int, int]: ...

@final
class ShingleStore:
    def __new__(cls) -> ShingleStore: ...
    def extend(self, docs: object, offsets: object, data: object) -> None: ...
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...

@final
class UnionFind:
    def __new__(cls, n: int) -> UnionFind: ...
    def union_edges(self, a: object, b: object) -> None: ...
    def roots(self) -> bytes: ...
    def __len__(self) -> int: ...

# -- text (crates/llmpipe-text, crates/llmpipe-py/src/text.rs) -----------------------------------

def clean_texts(offsets: object, data: object, form: str = "NFC") -> tuple[IdBuffer, IdBuffer, int]:
    """The normalize stage's cleaning of an Arrow string column: new (int64 offsets, data), rows changed."""

def claim_thread_pool(threads: int) -> bool:
    """Make this process's Rust thread pool with ``threads`` threads; False when it exists already."""

def count_bytes(data: object, byte: int) -> int:
    """How many bytes of a buffer (bytes, memoryview, numpy uint8) equal ``byte``."""

def parse_jsonl_block(
    block: object,
    first: int,
    text_field: str,
    id_field: str,
    id_prefix: str,
    max_doc_bytes: int,
    max_line_bytes: int,
) -> tuple[
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    list[tuple[int, int, int, int]],
    int,
]:
    """The documents of a block of whole JSON lines: (positions, text offsets, text, id offsets, ids,
    meta offsets, meta) as int64 / Arrow string buffers (int32 offsets), the lines left to the Python
    reader as (line, start, end, documents before), and the block's line count."""

def word_counts(offsets: object, data: object) -> bytes:
    """``len(text.split())`` per row of an Arrow string column (int64 offsets, data): u32 LE bytes."""

def utf8_prefixes(offsets: object, data: object, max_chars: int) -> list[bytes]:
    """The first ``max_chars`` characters of each row of an Arrow string column (int64 offsets,
    data) as UTF-8 bytes: ``utf8_slice_codeunits(0, max_chars)`` then ``to_pylist``."""

def normalize_batch(
    texts: Sequence[str],
    lowercase: bool = True,
    collapse_whitespace: bool = True,
    strip_punctuation: bool = False,
    nfc: bool = True,
) -> list[str]: ...
def html_depths(pages: Sequence[str], limit: int) -> list[int]: ...
def content_hashes(
    texts: _Texts,
    seed: int = 0,
    lowercase: bool = True,
    collapse_whitespace: bool = True,
    strip_punctuation: bool = False,
    nfc: bool = True,
) -> bytes: ...

# -- quality (crates/llmpipe-quality, crates/llmpipe-py/src/quality.rs) ----------------------------

def quality_heuristics(
    texts: _Texts, config_json: str, all_reasons: bool = False
) -> tuple[list[list[str]], list[str | None]]: ...
def quality_filter(name: str, texts: _Texts, config_json: str) -> list[str | None]: ...
def quality_c4(texts: _Texts, config_json: str) -> tuple[list[str | None], list[str | None]]: ...
def quality_c4_column(texts: _Texts, config_json: str) -> tuple[list[str | None], IdBuffer, IdBuffer, int]:
    """C4 over an Arrow column: drop reasons, the texts after it as (int64 offsets, data), rows changed."""

def english_words(texts: _Texts) -> list[list[str]]: ...
def detect_language(texts: _Texts) -> tuple[list[str], list[float]]: ...
def language_codes() -> list[tuple[str, str]]: ...
def quality_defaults() -> str:
    """The Rust core's default of every filter config, JSON keyed by filter (tests compare it with Python's)."""

def pii_redact(
    texts: _Texts, config_json: str
) -> tuple[list[str | None], list[tuple[int, int, int, int]]]: ...

@final
class QualityModel:
    @staticmethod
    def train(positive: _Texts, negative: _Texts, config_json: str = "{}") -> QualityModel: ...
    @staticmethod
    def load(path: str | PathLike[str]) -> QualityModel: ...
    def save(self, path: str | PathLike[str]) -> None: ...
    def score(self, texts: _Texts) -> list[float]: ...
    @property
    def bits(self) -> int: ...

# -- fastText models (crates/llmpipe-quality/src/fasttext.rs, crates/llmpipe-py/src/fasttext.rs) -----

@final
class FastTextModel:
    """A supervised fastText model (``.bin``/``.ftz``); texts: list of str or (offsets, data) buffers."""

    @staticmethod
    def load(path: str | PathLike[str]) -> FastTextModel: ...
    def predict(
        self, texts: _Texts, k: int = 1, threshold: float = 0.0
    ) -> tuple[list[list[int]], list[list[float]]]: ...
    @property
    def labels(self) -> list[str]: ...
    @property
    def dim(self) -> int: ...
    @property
    def loss(self) -> str: ...

# -- shards (crates/llmpipe-shard, crates/llmpipe-py/src/shard.rs) -------------------------------

def crc32_blocks(data: object, block_bytes: int) -> bytes:
    """CRC-32 (zlib's) of every ``block_bytes`` piece of a uint8 buffer, in parallel: u32 LE bytes."""

@final
class BatchStream:
    """Batches of one rank built ahead by a Rust thread: ``next()`` -> (rows, targets, doc_ids) or None."""

    def __new__(
        cls,
        tokens: Sequence[object],
        valid: Sequence[object],
        width: int,
        plan: object,
        batch_size: int,
        eos_id: int,
        *,
        dtype: str = "int64",
        doc_ids: bool = True,
        depth: int = 4,
    ) -> BatchStream: ...
    def next(self) -> tuple[IdBuffer, IdBuffer | None, IdBuffer | None] | None: ...

@final
class SamplePacker:
    """Documents packed into samples of seq_len + 1 ids: ``add``/``finish`` -> (rows, valid)."""

    def __new__(
        cls, seq_len: int, eos_id: int, dtype: str, packing: str = "concat", best_fit_window: int = 512
    ) -> SamplePacker: ...
    def add(self, ids: object, offsets: object) -> tuple[IdBuffer, IdBuffer]: ...
    def finish(self) -> tuple[IdBuffer, IdBuffer]: ...
    @property
    def counts(self) -> tuple[int, int, int]: ...

# line/paragraph and exact-substring dedup (crates/llmpipe-py/src/segments.rs)
def segment_keys(
    offsets: object, data: object, unit: str = "line", min_chars: int = 0, seed: int = 0
) -> tuple[IdBuffer, bytes]:
    """Each text's distinct segment keys: (uint32 text index per row, 16-byte keys), texts in order."""

def drop_segments(
    offsets: object,
    data: object,
    repeated: object,
    exempt_docs: object,
    exempt_keys: object,
    unit: str = "line",
    min_chars: int = 0,
    seed: int = 0,
) -> tuple[IdBuffer, IdBuffer, IdBuffer, IdBuffer]:
    """Texts without their repeated segments: (int64 offsets, data, uint32 segments, int64 bytes removed)."""

def repeated_spans(text: object, start: int, min_len: int) -> IdBuffer:
    """int64 (start, end) pairs of the repeated spans of ``text`` at or after ``start``, relative to it."""

def suffix_array(text: object) -> IdBuffer:
    """The int32 suffix array of ``text``."""

# -- URL filter and decontamination (crates/llmpipe-quality/src/url.rs, crates/llmpipe-dedup/src/decont.rs,
#    crates/llmpipe-py/src/curation.rs) ------------------------------------------------------------------

@final
class UrlFilter:
    """datatrove's URLFilter rules; verdict codes 0 keep, 1 domain, 2 subdomain, 3 url, 4 word,
    5 soft word, 6 subword, 7 no URL."""

    def __new__(cls, psl_rules: list[str], soft_word_threshold: int) -> UrlFilter: ...
    def add_list(self, kind: str, data: bytes) -> int: ...
    def finish(self) -> None: ...
    def sizes(self) -> tuple[int, int, int, int, int]: ...
    def judge_urls(self, urls: _Texts) -> bytes: ...
    def judge_metas(self, metas: _Texts, fields: list[str]) -> bytes: ...

def decont_ngram_hashes(texts: _Texts, n: int) -> bytes: ...
def decont_first_match(texts: _Texts, n: int, table: object, sets: object) -> bytes: ...
def decont_cut_spans(
    texts: _Texts, n: int, table: object, sets: object
) -> tuple[IdBuffer, IdBuffer, IdBuffer, IdBuffer, IdBuffer]: ...
