"""Local Hugging Face models for the model stages (``classifier``, ``semantic_dedup``).

A ``ModelSpec`` names a model directory and how to run it; ``run_model_file`` scores (or embeds) the
documents of one key file, batched by length, and stores the result in a cache keyed by the content
(model files, settings, ids and texts), so a re-run, a resumed run or a threshold sweep reads it back
instead of running the model again. The model is loaded once per process (``_loaded``): once per
local worker, once per Ray actor (``run_on_models``).

Text is cut exactly as ``transformers.pipeline("text-classification", truncation=True)`` cuts it: the
first ``max_length`` tokens of the tokenizer's encoding (special tokens included); by default
``max_length`` is the tokenizer's ``model_max_length``. A long text is tokenized from a prefix that gives
the same tokens (``Checked.encode``), and a file a window of documents at a time, so that neither a
long document nor a large part makes memory grow. Within a window of ``WINDOW_BATCHES`` batches
the documents are sorted by token count so that a batch pads little (on a GPU to a multiple of
``GPU_WIDTH_STEP`` tokens); results keep the input order.
On a GPU the model runs in bf16, on CPU in fp32. Only safetensors weights are read (no pickle) and no
code from the model directory runs: every load passes ``trust_remote_code=False`` (without it transformers
asks on the terminal whether to run a directory's ``auto_map`` code), and such a directory is one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llmpipe.curate.executors import Executor, map_with
from llmpipe.curate.workdir import atomic_path
from llmpipe.errors import ConfigError
from llmpipe.quiet import quiet_imports

#: documents sorted by length together: this many batches
WINDOW_BATCHES = 16
#: on a GPU a batch is padded to a multiple of this many tokens: each new batch shape costs the GPU
#: libraries a first-call set-up (a third of a second on an H100), so the widths 1..512 of a 512-token
#: model come as 8 shapes, not up to 512 (padding is masked: the scores are the same)
GPU_WIDTH_STEP = 64
#: on CPU a batch ends early rather than pad more than this share of its tokens: there the model's
#: cost follows the tokens it is given, padding included, and a batch gains little over one document
CPU_MAX_PADDING = 0.05
EXTRA = "classify"
#: a text is tokenized from its first ``max_length`` times this many characters (then more if need be)
CHARS_PER_TOKEN = 64
#: why a model directory that names its own code is refused
OWN_CODE = "the model asks to run its own code (auto_map); llmpipe never runs code from a model directory"


def need_extra(what: str) -> None:
    """One line naming the extra when torch or transformers are missing."""
    for module in ("torch", "transformers"):
        try:
            __import__(module)
        except ModuleNotFoundError:
            raise ConfigError(
                f"{what} needs the '{EXTRA}' extra ({module} is not installed): pip install 'llmpipe[{EXTRA}]'"
            ) from None


@dataclass(frozen=True)
class ModelSpec:
    """What a process needs to load and run one model (small and picklable)."""

    path: str
    kind: Literal["classifier", "encoder"]
    max_length: int | None = None
    batch_size: int = 32
    #: encoder only: "mean" (over the attention mask) or "cls"
    pooling: str = "mean"
    #: the sha256 of the model directory's files (cache key; set by ``digest``)
    digest: str = ""


def model_files(path: str) -> list[Path]:
    """The regular files of a model directory, sorted (what its digest covers)."""
    return sorted(p for p in Path(path).iterdir() if p.is_file())


def digest(path: str) -> str:
    h = hashlib.sha256()
    for f in model_files(path):
        h.update(f"{f.name}\0{f.stat().st_size}\0".encode())
        with f.open("rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def check_dir(path: str | None, where: str) -> str:
    if not path:
        raise ValueError(f"{where}.model: the path of a local Hugging Face model directory")
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"{where}.model: {path} is not a directory")
    if not (p / "config.json").is_file():
        raise ValueError(f"{where}.model: {path} has no config.json (not a Hugging Face model directory)")
    return str(p.resolve())


class Checked:
    """A model directory's config, tokenizer and safetensors headers, checked against each other and the
    spec without reading the weights: a file that cannot be read, weights that do not fit the config
    or a head that is missing is one line before any work (``check_weights``)."""

    def __init__(self, spec: ModelSpec) -> None:
        need_extra("a model stage")
        import transformers
        from transformers import AutoConfig, AutoTokenizer

        transformers.logging.set_verbosity_error()
        self.spec = spec
        where = spec.path
        try:
            self.config = AutoConfig.from_pretrained(
                spec.path, local_files_only=True, trust_remote_code=False
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # [1, 2]: a TypeError
            refuse_own_code(where, e)
            raise ConfigError(
                f"{where}: not a model directory transformers can read ({first_line(e)})"
            ) from None
        archs = list(self.config.architectures or [])
        if spec.kind == "classifier" and not any(a.endswith("ForSequenceClassification") for a in archs):
            raise ConfigError(
                f"{where}: not a sequence classification model (architectures: {archs}); "
                "the classifier needs a *ForSequenceClassification head"
            )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                spec.path, local_files_only=True, trust_remote_code=False
            )
        except Exception as e:  # noqa: BLE001 - the tokenizers library raises a bare Exception (bad JSON)
            refuse_own_code(where, e)
            raise ConfigError(f"{where}: no tokenizer that transformers can load ({first_line(e)})") from None
        vocab = int(getattr(self.config, "vocab_size", 0) or 0)
        if vocab and len(self.tokenizer) > vocab:
            raise ConfigError(
                f"{where}: the tokenizer does not match the model: {len(self.tokenizer)} tokens, "
                f"the model embeds {vocab}"
            )
        self.max_length = spec.max_length or int(self.tokenizer.model_max_length)
        positions = int(getattr(self.config, "max_position_embeddings", 0) or 0)
        if self.max_length > 1_000_000:
            raise ConfigError(f"{where}: the tokenizer sets no model_max_length; give max_length")
        if positions and self.max_length > positions:
            raise ConfigError(
                f"{where}: max_length {self.max_length} exceeds the model's {positions} positions"
            )
        special = int(self.tokenizer.num_special_tokens_to_add())
        if self.max_length <= special:
            raise ConfigError(
                f"{where}: max_length {self.max_length} leaves no token of text after the tokenizer's "
                f"{special} special tokens"
            )
        self.check_weights()

    def model_class(self) -> Any:
        import transformers

        if self.spec.kind == "classifier":
            return transformers.AutoModelForSequenceClassification
        return transformers.AutoModel

    def check_weights(self) -> None:
        """The safetensors files' headers (read, not the tensors) against the model the config builds (on
        the meta device: no memory): every file readable, every tensor the shape the config gives it, and
        the classifier's head present (transformers would start a missing one at random, silently)."""
        import torch
        from safetensors import SafetensorError, safe_open

        where = self.spec.path
        shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        for f in weight_files(where):
            try:
                with safe_open(str(f), framework="pt") as fh:
                    for k in fh.keys():  # noqa: SIM118 - a safe_open handle is not a mapping
                        shapes[k] = (tuple(fh.get_slice(k).get_shape()), f.name)
            except (SafetensorError, OSError, ValueError) as e:
                raise ConfigError(f"{where}: {f.name} is not a safetensors file ({first_line(e)})") from None
        try:
            with torch.device("meta"), quiet_imports():
                model = self.model_class().from_config(self.config)
        except (ValueError, TypeError, KeyError, AttributeError, RuntimeError) as e:
            raise ConfigError(f"{where}: config.json does not describe a model ({first_line(e)})") from None
        prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""

        def plain(key: str) -> str:  # a checkpoint of the base model or of one with a head: the same keys
            return key[len(prefix) :] if prefix and key.startswith(prefix) else key

        want = {plain(k): tuple(v.shape) for k, v in model.state_dict().items()}
        have = {plain(k): v for k, v in shapes.items()}
        for key, (shape, name) in have.items():
            if key in want and want[key] != shape:
                raise ConfigError(
                    f"{where}: the weights do not fit config.json: {key} is {list(shape)} in {name}, "
                    f"the config makes it {list(want[key])}"
                )
        if not set(want) & set(have):
            raise ConfigError(f"{where}: the safetensors weights hold none of the model's tensors")
        if self.spec.kind == "classifier":
            head = sorted(k for k in model.state_dict() if prefix and not k.startswith(prefix))
            missing = [k for k in head if k not in have]
            if missing:
                raise ConfigError(
                    f"{where}: the weights have no classification head ({', '.join(missing)}): "
                    "its scores would be random"
                )

    def encode(self, texts: list[str]) -> list[list[int]]:
        """The token ids of each text cut to its first ``max_length`` (special tokens included): what the
        tokenizer gives the whole text with ``truncation=True``, without tokenizing all of a long text (a
        tokenizer encodes the whole input before it truncates: 3 GB and 40 s for one 10 MB text).

        Each text is cut after ``max_length * CHARS_PER_TOKEN`` characters, just before the next
        whitespace (where pre-tokenizers split, so the tokens before the cut are the whole text's); where
        the cut text gives fewer than ``max_length`` ids (long words, one [UNK] each), it is tried again
        with twice the characters, until its ids fill ``max_length`` or the text is whole."""
        cut = self.max_length * CHARS_PER_TOKEN
        out: list[list[int]] = [[] for _ in texts]
        todo = list(range(len(texts)))
        while todo:
            pieces = [cut_text(texts[i], cut) for i in todo]
            enc = self.tokenizer(pieces, truncation=True, max_length=self.max_length)["input_ids"]
            again = []
            for ids, piece, i in zip(enc, pieces, todo, strict=True):
                if len(ids) >= self.max_length or len(piece) == len(texts[i]):
                    out[i] = list(ids)
                else:
                    again.append(i)
            todo, cut = again, cut * 2
        return out


class Loaded(Checked):
    """A checked model with its weights, on the best device of this process."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        import torch

        threads = os.environ.get("RAYON_NUM_THREADS")  # a pool worker's or a Ray task's share of the cores
        if threads and threads.isdigit() and int(threads) > 0:
            torch.set_num_threads(int(threads))
        from safetensors import SafetensorError

        try:
            with quiet_imports():  # transformers' quantizers import torchao, which logs deprecations
                model = self.model_class().from_pretrained(
                    spec.path, local_files_only=True, use_safetensors=True, trust_remote_code=False
                )
        except (OSError, ValueError, KeyError, TypeError, AttributeError, SafetensorError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and "state_dict" not in str(e):  # out of memory ...: as it is
                raise
            refuse_own_code(spec.path, e)
            lines = [x.strip() for x in str(e).splitlines()]
            why = next((x for x in lines if x.startswith("size mismatch")), first_line(e))
            raise ConfigError(f"{spec.path}: cannot load the model's safetensors weights ({why})") from None
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.model = model.to(self.device, self.dtype).eval()
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.width_step = GPU_WIDTH_STEP if self.device.type == "cuda" else 1
        self.max_padding = None if self.device.type == "cuda" else CPU_MAX_PADDING

    def batches(self, ids: list[list[int]]) -> list[np.ndarray]:
        """The documents of each batch (indices into ``ids``), sorted by length within each window; a
        batch of at most ``batch_size`` documents, ended early where it would pad more than
        ``max_padding`` of its tokens (on CPU)."""
        bs = self.spec.batch_size
        window = bs * WINDOW_BATCHES
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        out = []
        for start in range(0, len(ids), window):
            order = start + np.argsort(lengths[start : start + window], kind="stable")
            if self.max_padding is None:
                out += [order[j : j + bs] for j in range(0, len(order), bs)]
                continue
            first, tokens = 0, 0
            for j, doc in enumerate(order):
                n = int(lengths[doc])  # the widest so far: the order is by length
                if j > first and (
                    j - first == bs or (j + 1 - first) * n - (tokens + n) > self.max_padding * (tokens + n)
                ):
                    out.append(order[first:j])
                    first, tokens = j, 0
                tokens += n
            if first < len(order):
                out.append(order[first:])
        return out

    def forward(self, ids: list[list[int]]) -> Any:
        """The model's output for one batch of token id lists (padded on the right, masked)."""
        import torch

        longest = max(len(x) for x in ids)
        width = max(min(-(-longest // self.width_step) * self.width_step, self.max_length), longest)
        inp = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for r, x in enumerate(ids):
            inp[r, : len(x)] = x
            mask[r, : len(x)] = 1
        t_ids, t_mask = torch.from_numpy(inp).to(self.device), torch.from_numpy(mask).to(self.device)
        with torch.inference_mode():
            return self.model(input_ids=t_ids, attention_mask=t_mask), t_mask

    def run(self, texts: Sequence[str] | pa.ChunkedArray) -> np.ndarray:
        """Classifier: the logits (float32, [n, labels]); encoder: normalised embeddings ([n, dim])."""
        out: np.ndarray | None = None
        window = self.spec.batch_size * WINDOW_BATCHES
        for start in range(0, len(texts), window):  # a window at a time: memory does not grow with the file
            part = texts[start : start + window]
            ids = self.encode(
                part.to_pylist() if isinstance(part, pa.ChunkedArray | pa.Array) else list(part)
            )
            for sel in self.batches(ids):
                vec = self.vectors([ids[j] for j in sel])
                if out is None:
                    out = np.zeros((len(texts), vec.shape[1]), dtype=np.float32)
                out[start + sel] = vec
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)

    def vectors(self, ids: list[list[int]]) -> np.ndarray:
        """The logits or normalised embeddings of one batch (float32 numpy, in the batch's order)."""
        import torch

        res, mask = self.forward(ids)
        if self.spec.kind == "classifier":
            vec = res.logits
        else:
            hidden = res.last_hidden_state
            if self.spec.pooling == "cls":
                vec = hidden[:, 0]
            else:
                m = mask.unsqueeze(-1).to(hidden.dtype)
                vec = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
            vec = torch.nn.functional.normalize(vec.float(), dim=-1)
        out: np.ndarray = vec.float().cpu().numpy()
        return out


def weight_files(path: str) -> list[Path]:
    """The safetensors files transformers reads from ``path``: model.safetensors, or the shards its
    index names (plain file names in the directory; never a pickle)."""
    p = Path(path)
    if (p / "model.safetensors").is_file():
        return [p / "model.safetensors"]
    index = p / "model.safetensors.index.json"
    if not index.is_file():
        raise ConfigError(f"{path}: no model.safetensors (only safetensors weights are read, never a pickle)")
    try:
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"{path}: {index.name} is not a safetensors index ({first_line(e)})") from None
    bad = [n for n in names if not isinstance(n, str) or Path(n).name != n or not (p / n).is_file()]
    if bad or not names:
        raise ConfigError(f"{path}: {index.name} names shards that are not files of the directory: {bad[:3]}")
    return [p / n for n in names]


_SPACE = re.compile(r"\s")


def cut_text(text: str, chars: int) -> str:
    """``text`` cut after ``chars`` characters, just before the next whitespace within as many again
    (a text without whitespace there is cut at ``2 * chars``); a shorter text whole."""
    if len(text) <= chars:
        return text
    space = _SPACE.search(text, chars, 2 * chars)
    return text[: space.start() if space else 2 * chars]


def refuse_own_code(where: str, e: BaseException) -> None:
    """The one line for a directory whose config or tokenizer config names its own code (``auto_map``):
    transformers, told ``trust_remote_code=False``, refuses it rather than asking on the terminal."""
    if "trust_remote_code" in str(e):
        raise ConfigError(f"{where}: {OWN_CODE}") from None


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


_LOADED: dict[ModelSpec, Loaded] = {}


def loaded(spec: ModelSpec) -> Loaded:
    """The model of ``spec``, loaded once per process."""
    m = _LOADED.get(spec)
    if m is None:
        if len(_LOADED) >= 4:
            del _LOADED[next(iter(_LOADED))]
        m = _LOADED[spec] = Loaded(spec)
    return m


def cache_key(spec: ModelSpec, ids: pa.ChunkedArray, texts: pa.ChunkedArray) -> str:
    """The content a result depends on: the model's files, how it runs, the documents' ids and texts."""
    h = hashlib.sha256(repr((spec.digest, spec.kind, spec.max_length, spec.pooling)).encode())
    for col in (ids, texts):
        for chunk in col.chunks:
            for b in chunk.buffers()[1:]:
                if b is not None:
                    h.update(memoryview(b))
            h.update(f"\0{len(chunk)}\0{chunk.offset}\n".encode())
    return h.hexdigest()


def run_model_file(spec: ModelSpec, key_file: Path, cache: Path) -> Path:
    """The model's output for the documents of ``key_file`` (columns ``id``, ``text``), stored in
    ``cache`` under its content key as ``.npy`` (float32 rows in the file's order); returns its path."""
    t = pq.read_table(key_file, columns=["id", "text"])
    ids, texts = t.column("id"), t.column("text")
    # a canonical layout (one chunk, offset 0) so that the key depends on the content only
    ids, texts = (
        pa.chunked_array([c.combine_chunks().take(pa.array(np.arange(len(c))))]) for c in (ids, texts)
    )
    out = cache / f"{cache_key(spec, ids, texts)}.npy"
    if out.exists():
        return out
    arr = loaded(spec).run(texts) if t.num_rows else np.zeros((0, 0), dtype=np.float32)
    with atomic_path(out) as tmp, tmp.open("wb") as fh:
        np.save(fh, arr, allow_pickle=False)
    return out


def read_result(path: Path) -> np.ndarray:
    return np.load(path, allow_pickle=False)


@dataclass(frozen=True)
class Resources:
    """What one model worker takes on a Ray cluster (one actor each)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    #: actors in the pool (0: as many as the cluster's CPUs or GPUs allow, at most one per file)
    actors: int = 0


def check_resources(num_cpus: float, num_gpus: float, actors: int) -> None:
    """A model section's Ray resources: none negative (0 CPUs or GPUs is Ray's own "none", 0 actors
    "as many as fit")."""
    for key, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("actors", actors)):
        if not value >= 0:  # NaN too
            raise ValueError(f"{key} must be >= 0, not {value}")


def run_on_models(
    executor: Executor | None,
    fn: Callable[..., Any],
    args: Sequence[tuple[Any, ...]],
    desc: str,
    resources: Resources,
) -> list[Any]:
    """``fn(*a)`` for every ``a``: on a pool of Ray actors (each loads the model once) when the
    executor has one, else as the executor's ordinary steps (each local worker loads it once)."""
    on_actors = getattr(executor, "map_actors", None)
    if on_actors is not None and args:
        return list(on_actors(fn, args, desc, resources.num_cpus, resources.num_gpus, resources.actors))
    return map_with(executor, fn, args, desc)
