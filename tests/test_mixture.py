"""Weighted mixtures of shard directories: token shares, one order on any rank count, exact resume,
stages, capped sources, and refusing sources of another tokenizer or seq_len. Real text, real shards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llmpipe.data import ShardDataset, ShardWriter
from llmpipe.data.loader import MixtureLoader
from llmpipe.data.mixture import MixedShards, MixStage, MixtureOrder
from llmpipe.errors import ShardError

ROOT = Path(__file__).resolve().parents[1]

from llmpipe.train.byte_shards import EOS, VOCAB, byte_tokenizer_json, write_byte_shards  # noqa: E402

NAMES = ["plays", "wiki", "alice"]


@pytest.fixture(scope="module")
def sources(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Shakespeare and French Wikipedia packed end to end; Alice's lines packed whole (padded rows), so
    its samples hold fewer tokens and a token ratio differs from a sample ratio."""
    books, out = data_dir / "reference" / "books", tmp_path_factory.mktemp("mix")
    return [
        write_byte_shards(books / "tiny-shakespeare.txt", out / "plays", max_chars=500_000),
        write_byte_shards(books / "wiki-fr-extract.txt", out / "wiki", max_chars=500_000),
        write_lines(books / "wonderland.txt", out / "alice", byte_tokenizer_json(), 64, packing="best_fit"),
    ]


def mixed(paths: list[Path], split: str = "train") -> MixedShards:
    return MixedShards(NAMES, [ShardDataset(p, split) for p in paths])


def order(
    shards: MixedShards, weights: tuple[float, ...], *, caps=(0, 0, 0), stages=(), **kw
) -> MixtureOrder:
    return MixtureOrder(
        shards.mix_sources(list(caps)), [MixStage(0, weights), *stages], seed=kw.pop("seed", 5), **kw
    )


def test_token_shares_follow_the_weights_over_10k_samples(sources: list[Path]) -> None:
    shards = mixed(sources)
    assert shards.tokens_per_sample[2] < 0.7 * shards.tokens_per_sample[0]  # alice's rows are padded
    weights = (0.5, 0.3, 0.2)
    src, local = order(shards, weights).take(0, 10_000)
    tokens = shards.targets(shards.offsets[src] + local)
    share = np.bincount(src, weights=tokens, minlength=3) / tokens.sum()
    np.testing.assert_allclose(share, weights, atol=0.01)
    # a sample ratio would have missed: alice gets more samples than 20% to hold 20% of the tokens
    assert np.bincount(src)[2] / len(src) > 0.25
    # every draw within a source is a distinct sample until the source is exhausted
    for i in range(3):
        picked = local[src == i]
        assert len(np.unique(picked)) == min(len(picked), len(shards.datasets[i]))


def _rows(loader: MixtureLoader, n: int) -> list[np.ndarray]:
    it = iter(loader)
    return [next(it).input.numpy().copy() for _ in range(n)]


def loader(shards: MixedShards, o: MixtureOrder, bs: int, rank: int = 0, world: int = 1) -> MixtureLoader:
    return MixtureLoader(shards, o, bs, rank=rank, world_size=world, prefetch=2, chunk=4)


def test_the_same_global_order_on_1_2_and_3_ranks(sources: list[Path]) -> None:
    shards = mixed(sources)
    w = (0.6, 0.25, 0.15)
    reference = _rows(loader(shards, order(shards, w), 6), 12)
    for world in (2, 3):
        per_rank = [_rows(loader(shards, order(shards, w), 6 // world, r, world), 12) for r in range(world)]
        for step in range(12):
            np.testing.assert_array_equal(np.concatenate([p[step] for p in per_rank]), reference[step])


def test_resume_mid_mixture_also_from_2_ranks_to_1(sources: list[Path]) -> None:
    shards = mixed(sources)
    w = (0.6, 0.25, 0.15)
    stage = [MixStage(4 * 8 * 3, (0.0, 0.0, 1.0))]  # after 3 micro-batches of 8 (x4 chunk), alice only
    full = _rows(loader(shards, order(shards, w, stages=stage), 8), 30)
    states, head = [], []
    for rank in range(2):
        ld = loader(shards, order(shards, w, stages=stage), 4, rank, 2)
        head.append(_rows(ld, 11))
        states.append(json.loads(json.dumps(ld.state_dict())))  # survives serialisation
    assert states[0] == states[1]
    for step in range(11):
        np.testing.assert_array_equal(np.concatenate([head[0][step], head[1][step]]), full[step])
    one = loader(shards, order(shards, w, stages=stage), 8)
    one.load_state_dict(states[0])
    tail = _rows(one, 19)
    for step in range(19):
        np.testing.assert_array_equal(tail[step], full[11 + step])
    # the per-source counters continue too: an uninterrupted loader agrees after 30 batches
    ref = loader(shards, order(shards, w, stages=stage), 8)
    _rows(ref, 30)
    assert one.source_stats() == ref.source_stats()
    assert sum(v for k, v in ref.source_stats().items() if k.startswith("samples/")) == 30 * 8


def test_a_stage_switches_at_its_position(sources: list[Path]) -> None:
    shards = mixed(sources)
    switch = 3000
    o = order(shards, (0.7, 0.3, 0.0), stages=[MixStage(switch, (0.0, 0.0, 1.0))])
    src, _ = o.take(0, 5000)
    assert set(src[:switch].tolist()) == {0, 1}
    assert set(src[switch:].tolist()) == {2}
    assert [e.position for e in o.events] == [switch] and "stage 1" in o.events[0].message


@pytest.mark.parametrize("policy", ["stop", "renormalize"])
def test_a_capped_source_ends_as_configured(sources: list[Path], policy: str) -> None:
    shards = mixed(sources)
    n_alice = len(shards.datasets[2])
    o = order(shards, (0.4, 0.2, 0.4), caps=(0, 0, 1), policy=policy)
    src, local = o.take(0, 6 * n_alice)
    ended_at = o.events[0].position
    assert "alice (max_epochs 1) exhausted" in o.events[0].message
    # alice's last sample is the one just before the event; each of its samples exactly once
    assert src[ended_at - 1] == 2 and sorted(local[src == 2].tolist()) == list(range(n_alice))
    if policy == "stop":
        assert len(src) == ended_at and "the data ends here" in o.events[0].message
        ld = loader(shards, order(shards, (0.4, 0.2, 0.4), caps=(0, 0, 1), policy=policy), 16)
        batches = sum(1 for _ in ld)
        assert batches == ended_at // 16 and ld.position == batches * 16
        assert ld.ended and [e.position for e in ld.new_events()] == [ended_at]
    else:
        assert len(src) == 6 * n_alice and "renormalised to plays=0.6667, wiki=0.3333" in o.events[0].message
        rest = src[ended_at:]
        assert 2 not in rest
        np.testing.assert_allclose(np.bincount(rest) / len(rest), [2 / 3, 1 / 3], atol=0.01)


def write_lines(src: Path, out: Path, tokenizer: str, seq_len: int, *, packing: str = "concat") -> Path:
    """Byte shards of ``src``'s lines; best-fit with a window of one sample pads most rows."""
    out.mkdir(parents=True)
    (out / "tokenizer.json").write_text(tokenizer)
    w = ShardWriter(
        out,
        seq_len=seq_len,
        vocab_size=VOCAB,
        eos_id=EOS,
        tokenizer_file=out / "tokenizer.json",
        val_fraction=0.05,
        packing=packing,
        best_fit_window=1,
    )
    lines = [p.strip().encode() for p in src.read_text(encoding="utf-8").split("\n") if p.strip()]
    w.add_documents(np.frombuffer(p, dtype=np.uint8).astype(np.uint16) for p in lines)
    w.close()
    return out


def test_sources_of_another_tokenizer_or_seq_len_are_refused(
    sources: list[Path], data_dir: Path, tmp_path: Path
) -> None:
    book = data_dir / "reference" / "books" / "notre-dame-de-paris.txt"
    other_tok = json.loads(byte_tokenizer_json())
    other_tok["added_tokens"][0]["content"] = "<|end|>"
    odd = write_lines(book, tmp_path / "odd", json.dumps(other_tok), 64)
    with pytest.raises(ShardError) as e:
        MixedShards(["plays", "odd"], [ShardDataset(sources[0]), ShardDataset(odd)])
    msg = str(e.value)
    assert "\n" not in msg and "'plays'" in msg and "'odd'" in msg and "tokenizer sha256" in msg
    short = write_lines(book, tmp_path / "short", byte_tokenizer_json(), 32)
    with pytest.raises(ShardError, match=r"'plays' .*seq_len 64.* 'short' .*seq_len 32"):
        MixedShards(["plays", "short"], [ShardDataset(sources[0]), ShardDataset(short)])


def test_the_loader_batches_equal_the_rows_of_the_order(sources: list[Path]) -> None:
    """What the Rust batch builder gathers from the concatenated sources is the row the order names."""
    shards = mixed(sources)
    o = order(shards, (0.3, 0.3, 0.4))
    src, local = o.take(0, 40)
    batches = _rows(loader(shards, order(shards, (0.3, 0.3, 0.4)), 8), 5)
    got = np.concatenate(batches)
    want = np.stack([shards.datasets[s][i][:-1].astype(np.int64) for s, i in zip(src, local, strict=True)])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32
