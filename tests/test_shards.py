"""Shard format and loader: real text tokenised by HF tokenizers, packed, opened by peers, resumed exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from conftest import run_cli
from llmpipe.data import ShardDataset, ShardWriter, TokenLoader
from llmpipe.data.format import block_crc32s, dual_ipc_bytes
from llmpipe.data.verify import verify_directory
from llmpipe.errors import ShardError

EOS = "<|endoftext|>"


@pytest.fixture(scope="module")
def corpus(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """Real documents (speeches of tiny-shakespeare and paragraphs of Alice) and an HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = (data_dir / "reference" / "books" / "tiny-shakespeare.txt").read_text(encoding="utf-8")
    docs = [d.strip() for d in text.split("\n\n") if d.strip()][:3000]
    alice = (data_dir / "reference" / "books" / "wonderland.txt").read_text(encoding="utf-8")
    docs += [p.strip() for p in alice.split("\n\n") if len(p.strip()) > 400][:50]  # some long ones
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(docs, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return docs, path


def _encode(docs: list[str], tok_path: Path) -> tuple[list[np.ndarray], int, int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    ids = [np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(docs, add_special_tokens=False)]
    return ids, tok.token_to_id(EOS), tok.get_vocab_size()


def _write(out: Path, corpus: tuple[list[str], Path], **kw: object) -> dict:
    docs, tok_path = corpus
    ids, eos, vocab = _encode(docs, tok_path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes(tok_path.read_bytes())
    args: dict = {"seq_len": 64, "vocab_size": vocab, "eos_id": eos, "samples_per_shard": 300}
    args.update(kw)
    w = ShardWriter(out, tokenizer_file=out / "tokenizer.json", **args)
    for i in range(0, len(ids), 97):  # several calls, as the pipeline makes them
        w.add_documents(ids[i : i + 97])
    return w.close()


def _docs_from_rows(rows: list[np.ndarray], eos: int, tok_path: Path) -> list[str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    out, cur = [], []
    for row in rows:
        for t in row.tolist():
            if t == eos:
                out.append(tok.decode(cur, skip_special_tokens=False))
                cur = []
            else:
                cur.append(t)
    assert not cur
    return out


def test_shard_opens_in_pyarrow_and_hf_datasets(tmp_path: Path, corpus: tuple[list[str], Path]) -> None:
    import datasets

    m = _write(tmp_path / "s", corpus)
    assert m["dtype"] == "uint16"
    first = tmp_path / "s" / m["splits"]["train"]["shards"][0]["file"]
    by_file = ipc.open_file(str(first)).read_all()
    by_stream = ipc.open_stream(pa.memory_map(str(first))).read_all()
    assert by_file.equals(by_stream)
    assert by_file.num_rows == m["splits"]["train"]["shards"][0]["rows"]
    ds = datasets.Dataset.from_file(str(first))
    assert ds.num_rows == by_file.num_rows
    assert ds[3]["tokens"] == by_file.column("tokens")[3].as_py()


def test_concat_round_trip_gives_back_every_document_in_order(
    tmp_path: Path, corpus: tuple[list[str], Path]
) -> None:
    docs, tok_path = corpus
    m = _write(tmp_path / "s", corpus, val_fraction=0.0)
    ds = ShardDataset(tmp_path / "s", "train")
    rows = []
    for i in range(len(ds)):
        v = ds.valid(i)
        rows.append(ds[i][:v] if i == len(ds) - 1 else ds[i][: v - 1])  # samples overlap by one token
    assert _docs_from_rows(rows, m["tokenizer"]["eos_id"], tok_path) == docs
    assert verify_directory(tmp_path / "s").ok


def test_best_fit_keeps_documents_whole(tmp_path: Path, corpus: tuple[list[str], Path]) -> None:
    docs, tok_path = corpus
    ids, eos, _ = _encode(docs, tok_path)
    m = _write(tmp_path / "s", corpus, val_fraction=0.0, packing="best_fit", best_fit_window=64)
    assert m["packing"] == "best_fit"
    ds = ShardDataset(tmp_path / "s", "train")
    width = ds.seq_len + 1
    pieces = 0
    got: list[str] = []
    for i in range(len(ds)):
        row = ds[i][: ds.valid(i)]
        assert (ds[i][ds.valid(i) :] == eos).all(), "rows are padded with EOS after `valid`"
        pieces += int((row == eos).sum())
        got.extend(_docs_from_rows([row], eos, tok_path) if row[-1] == eos else [])
    short = [d for d, x in zip(docs, ids, strict=True) if len(x) + 1 <= width]
    # every document that fits in a sample is in one row, whole; the multiset is exactly preserved
    assert sorted(d for d in got if d in set(short)) == sorted(short)
    assert pieces == len(docs)
    total_valid = sum(ds.valid(i) for i in range(len(ds)))
    assert total_valid == m["counts"]["tokens"] == sum(len(x) + 1 for x in ids)
    assert m["counts"]["padding_tokens"] < 0.1 * len(ds) * width, "best fit packs tightly"
    assert verify_directory(tmp_path / "s").ok


def test_uint32_when_the_vocabulary_does_not_fit_uint16(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    w = ShardWriter(tmp_path, seq_len=8, vocab_size=70000, eos_id=69999, tokenizer_file=tmp_path / "t")
    w.add_documents([np.arange(65530, 65550)])
    m = w.close()
    assert m["dtype"] == "uint32"
    ds = ShardDataset(tmp_path, "train")
    assert ds[0][:3].tolist() == [65530, 65531, 65532]


def test_same_input_gives_byte_identical_shards(tmp_path: Path, corpus: tuple[list[str], Path]) -> None:
    a = _write(tmp_path / "a", corpus)
    b = _write(tmp_path / "b", corpus)
    files = [e["file"] for s in a["splits"].values() for e in s["shards"]]
    assert len(files) > 2
    entries = {e["file"]: e for s in a["splits"].values() for e in s["shards"]}
    for f in files:
        data = (tmp_path / "a" / f).read_bytes()
        assert data == (tmp_path / "b" / f).read_bytes()
        # written in pieces from one shard buffer: the bytes of the one-piece layout, and the
        # manifest's block checksums are those of the bytes on disk
        table = ipc.open_file(str(tmp_path / "a" / f)).read_all()
        assert data == dual_ipc_bytes(table, table.schema)
        assert entries[f]["block_crc32"] == block_crc32s(data, entries[f]["block_bytes"]).tolist()
    assert a["splits"] == b["splits"]


def _take(loader: TokenLoader, n: int) -> list[np.ndarray]:
    """Exactly ``n`` batches, as a training loop takes them (``next`` once per step)."""
    it = iter(loader)
    return [next(it).input.numpy().copy() for _ in range(n)]


def test_resume_gives_the_same_next_batches(tmp_path: Path, corpus: tuple[list[str], Path]) -> None:
    _write(tmp_path / "s", corpus)
    ds = ShardDataset(tmp_path / "s", "train")
    full = _take(TokenLoader(ds, 4, seed=7), 30)
    first = TokenLoader(ds, 4, seed=7)
    head = _take(first, 12)
    state = json.loads(json.dumps(first.state_dict()))  # survives serialisation
    resumed = TokenLoader(ds, 4, seed=7)
    resumed.load_state_dict(state)
    tail = _take(resumed, 18)
    for a, b in zip(full, head + tail, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("new_world", [1, 3])
def test_resume_on_another_number_of_ranks(
    tmp_path: Path, corpus: tuple[list[str], Path], new_world: int
) -> None:
    """2 ranks consume k steps; restored on 1 or 3 ranks, the union continues the same global order."""
    _write(tmp_path / "s", corpus)
    ds = ShardDataset(tmp_path / "s", "train")
    bs, steps = 3, 10
    seen: list[int] = []
    states = []
    for rank in range(2):
        loader = TokenLoader(ds, bs, rank=rank, world_size=2, seed=3)
        for batch in _take(loader, steps):
            seen.extend(_row_ids(ds, batch))
        states.append(loader.state_dict())
    assert states[0] == states[1], "every rank holds the same global position"
    after: list[int] = []
    for rank in range(new_world):
        loader = TokenLoader(ds, bs, rank=rank, world_size=new_world, seed=3)
        loader.load_state_dict(states[0])
        for batch in _take(loader, 5):
            after.extend(_row_ids(ds, batch))
    perm = np.random.default_rng([3, 0]).permutation(len(ds))
    n_before = 2 * bs * steps
    assert sorted(seen) == sorted(perm[:n_before].tolist())
    assert sorted(after) == sorted(perm[n_before : n_before + new_world * bs * 5].tolist())
    assert not set(seen) & set(after), "no sample repeated across the restart"


def _row_ids(ds: ShardDataset, inputs: np.ndarray) -> list[int]:
    """Map each input row back to its sample index (rows of this corpus are unique)."""
    if not hasattr(ds, "_index"):
        ds._index = {ds[i][:-1].tobytes(): i for i in range(len(ds))}  # type: ignore[attr-defined]
    return [ds._index[r.astype(ds[0].dtype).tobytes()] for r in inputs]  # type: ignore[attr-defined]


def test_flipped_byte_is_caught_by_verify_and_by_the_loader(
    tmp_path: Path, corpus: tuple[list[str], Path]
) -> None:
    m = _write(tmp_path / "s", corpus)
    shard = tmp_path / "s" / m["splits"]["train"]["shards"][1]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    rep = verify_directory(tmp_path / "s")
    assert not rep.ok and any("sha256 mismatch" in p and shard.name in p for p in rep.problems)
    with pytest.raises(ShardError, match="sha256 mismatch"):
        ShardDataset(tmp_path / "s", "train")
    with pytest.raises(ShardError, match="fast checksum"):
        ShardDataset(tmp_path / "s", "train", verify="fast")
    p = run_cli("inspect", str(tmp_path / "s"), "--verify", check=False)
    assert p.returncode == 1 and "sha256 mismatch" in p.stdout


def test_mismatched_run_settings_are_clear_errors(tmp_path: Path, corpus: tuple[list[str], Path]) -> None:
    _write(tmp_path / "s", corpus)
    with pytest.raises(ShardError, match="seq_len=64 but the run expects 128"):
        ShardDataset(tmp_path / "s", expect_seq_len=128)
    with pytest.raises(ShardError, match="tokenizer sha256"):
        ShardDataset(tmp_path / "s", expect_tokenizer_sha256="0" * 64)
    with pytest.raises(ShardError, match="no manifest.json"):
        ShardDataset(tmp_path)


def _reference_batch(ds: ShardDataset, idx: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs, targets (-100 at padding) and document ids of samples ``idx``, the slow obvious way."""
    rows = np.stack([ds[i].astype(np.int64) for i in idx])
    valid = np.array([ds.valid(i) for i in idx])
    x, y = rows[:, :-1], rows[:, 1:].copy()
    y[np.arange(ds.seq_len)[None, :] >= valid[:, None] - 1] = -100
    is_eos = x == ds.eos_id
    return x, y, np.cumsum(is_eos, axis=1) - is_eos


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_batches_hold_shifted_targets_masked_padding_and_document_ids(
    tmp_path: Path, corpus: tuple[list[str], Path], dtype: str
) -> None:
    """Best-fit shards (nearly every row padded) and concat shards (no row padded but the last)."""
    import torch

    for packing in ("best_fit", "concat"):
        _write(tmp_path / packing, corpus, packing=packing, val_fraction=0.0)
        ds = ShardDataset(tmp_path / packing, "train")
        loader = TokenLoader(ds, 5, seed=11, dtype=getattr(torch, dtype), infinite=False)
        perm = np.random.default_rng([11, 0]).permutation(len(ds))
        n = 0
        for k, b in enumerate(loader):
            x, y, d = _reference_batch(ds, perm[k * 5 : (k + 1) * 5].tolist())
            assert b.input.dtype == b.target.dtype == getattr(torch, dtype)
            assert b.doc_ids is not None and b.doc_ids.dtype == torch.int32
            np.testing.assert_array_equal(b.input.numpy(), x)
            np.testing.assert_array_equal(b.target.numpy(), y)
            np.testing.assert_array_equal(b.doc_ids.numpy(), d)
            n += 1
        assert n == len(ds) // 5, "a finite loader gives every full batch of the epoch once"


def test_uint32_shards_through_the_loader(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    w = ShardWriter(
        tmp_path, seq_len=8, vocab_size=70000, eos_id=69999, tokenizer_file=tmp_path / "t", val_fraction=0
    )
    w.add_documents([np.arange(65530, 65550), np.arange(3), np.arange(69990, 69999)])
    w.close()
    ds = ShardDataset(tmp_path, "train")
    b = next(iter(TokenLoader(ds, len(ds), seed=0, infinite=False)))
    x, y, d = _reference_batch(ds, np.random.default_rng([0, 0]).permutation(len(ds)).tolist())
    np.testing.assert_array_equal(b.input.numpy(), x)
    np.testing.assert_array_equal(b.target.numpy(), y)
    assert b.doc_ids is not None
    np.testing.assert_array_equal(b.doc_ids.numpy(), d)


def _python_packing(
    ids: list[np.ndarray], seq_len: int, eos: int, packing: str, window: int
) -> list[np.ndarray]:
    """The packing rules written plainly in Python (the first implementation of the writer): the
    oracle for the Rust packer. Returns the rows, each cut to its valid tokens."""
    import bisect

    width = seq_len + 1
    if packing == "concat":
        stream = np.concatenate([np.append(d, eos) for d in ids])
        n = (len(stream) - 1) // seq_len if len(stream) >= width else 0
        rows = [stream[k * seq_len : k * seq_len + width] for k in range(n)]
        tail = stream[n * seq_len :]
        return rows + ([tail] if len(tail) > 1 else [])
    rows, pool = [], []

    def drain() -> None:
        order = sorted(range(len(pool)), key=lambda i: (-len(pool[i]), i))
        bins: list[list[int]] = []
        free: list[tuple[int, int]] = []
        for i in order:
            n = len(pool[i])
            at = bisect.bisect_left(free, (n, -1))
            if at < len(free):
                space, b = free.pop(at)
                bins[b].append(i)
                if space - n > 0:
                    bisect.insort(free, (space - n, b))
            else:
                bins.append([i])
                if width - n > 0:
                    bisect.insort(free, (width - n, len(bins) - 1))
        rows.extend(np.concatenate([pool[i] for i in sorted(m)]) for m in bins)
        pool.clear()

    for d in ids:
        doc = np.append(d, eos)
        pool.extend(doc[s : s + width] for s in range(0, len(doc), width))
        if sum(len(p) for p in pool) >= window * width:
            drain()
    drain()
    return rows


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_rust_packing_equals_the_plain_python_rules(
    tmp_path: Path, corpus: tuple[list[str], Path], packing: str
) -> None:
    docs, tok_path = corpus
    ids, eos, _ = _encode(docs, tok_path)
    m = _write(tmp_path / "s", corpus, val_fraction=0.0, packing=packing, best_fit_window=16)
    ds = ShardDataset(tmp_path / "s", "train")
    want = _python_packing(ids, 64, eos, packing, 16)
    assert len(ds) == len(want) == m["counts"]["samples"]
    for i, row in enumerate(want):
        assert ds.valid(i) == len(row)
        np.testing.assert_array_equal(ds[i][: len(row)], row)
        assert (ds[i][len(row) :] == eos).all()


def test_ids_that_do_not_fit_the_shard_dtype_are_an_error(tmp_path: Path) -> None:
    from llmpipe.errors import ConfigError

    (tmp_path / "tokenizer.json").write_text("{}")
    w = ShardWriter(tmp_path, seq_len=8, vocab_size=1000, eos_id=999, tokenizer_file=tmp_path / "t")
    with pytest.raises(ConfigError, match="token id 70000 does not fit"):
        w.add_documents([np.array([1, 70000])])


def test_an_error_in_the_prefetch_thread_reaches_the_caller(
    tmp_path: Path, corpus: tuple[list[str], Path]
) -> None:
    """A shard whose ``valid`` column is corrupted (opened without verification) fails in the Rust
    prefetch thread; the loader raises a ShardError naming the sample instead of hanging or crashing."""
    m = _write(tmp_path / "s", corpus, val_fraction=0.0)
    shard = tmp_path / "s" / m["splits"]["train"]["shards"][0]["file"]
    mm = pa.memory_map(str(shard))
    base = mm.read_buffer().address
    mm.seek(0)
    valid = ipc.open_file(mm).read_all().column("valid").chunk(0).buffers()[1]
    at = valid.address - base  # row 0's int32 in the file
    del valid, mm
    data = bytearray(shard.read_bytes())
    data[at : at + 4] = (9999).to_bytes(4, "little")
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardError, match="sha256 mismatch"):
        ShardDataset(tmp_path / "s", "train")
    ds = ShardDataset(tmp_path / "s", "train", verify="none")
    assert ds.valid(0) == 9999
    with pytest.raises(ShardError, match="sample 0: valid=9999 outside 0..=65"):
        for _ in TokenLoader(ds, len(ds), seed=0, infinite=False):
            pass
