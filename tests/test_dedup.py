"""MinHash + LSH near dedup against ground truth planted in real text, with datasketch as oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import datasketch
import numpy as np
import pytest
from datasketch.lsh import _optimal_param
from dedup_corpus import Corpus, jaccard, planted_corpus, shingle_set
from llmpipe import _core
from llmpipe.dedup import minhash_signatures, near_duplicates, string_buffers
from llmpipe.errors import ConfigError


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> Corpus:
    return planted_corpus(data_dir)


@pytest.fixture(scope="module")
def sets(corpus: Corpus) -> list[frozenset[str]]:
    return [shingle_set(t) for t in corpus.texts]


def test_planted_pairs_cover_the_similarity_range(corpus: Corpus, sets: list[frozenset[str]]) -> None:
    js = [jaccard(sets[a], sets[b]) for a, b, _ in corpus.planted]
    assert sum(j >= 0.85 for j in js) >= 80
    assert sum(j < 0.5 for j in js) >= 30


def test_recall_at_default_settings(corpus: Corpus, sets: list[frozenset[str]]) -> None:
    clusters = near_duplicates(corpus.texts)
    high = [(a, b) for a, b, _ in corpus.planted if jaccard(sets[a], sets[b]) >= 0.85]
    found = sum(clusters[a] == clusters[b] for a, b in high)
    assert found / len(high) >= 0.95, (found, len(high))
    # every cluster id is the first document of its cluster
    assert all(clusters[c] == c for c in np.unique(clusters))


def test_candidate_and_merged_pairs_by_exact_jaccard(corpus: Corpus, sets: list[frozenset[str]]) -> None:
    """Every LSH candidate pair is scored by exact Jaccard; verification merges none below 0.5."""
    offsets, data = string_buffers(corpus.texts)
    raw_bands, _, soff, sdata = _core.minhash_sketch(offsets, data, _core.Shingling())
    bands = np.frombuffer(raw_bands, np.uint64).reshape(len(corpus.texts), 14)
    docs = np.repeat(np.arange(len(corpus.texts), dtype=np.uint32), 14)
    goff, members = _core.lsh_groups(bands.ravel(), docs.astype(np.uint64), docs)
    goff_a = np.frombuffer(goff, np.uint64)
    mem = np.frombuffer(members, np.uint32)
    candidates = {
        (int(x), int(y))
        for g in range(len(goff_a) - 1)
        for i, x in enumerate(mem[goff_a[g] : goff_a[g + 1]])
        for y in mem[goff_a[g] : goff_a[g + 1]][i + 1 :]
    }
    cand_j = {p: jaccard(sets[p[0]], sets[p[1]]) for p in candidates}
    # every planted pair at J >= 0.85 is a candidate but one or two (S-curve: 98.8% at 0.85)
    high = [(a, b) for a, b, _ in corpus.planted if jaccard(sets[a], sets[b]) >= 0.85]
    assert sum((a, b) in cand_j for a, b in high) >= 0.95 * len(high)

    store = _core.ShingleStore()
    store.extend(
        np.arange(len(corpus.texts), dtype=np.uint32),
        np.frombuffer(soff, np.uint64),
        np.frombuffer(sdata, np.uint32),
    )
    a, b = _core.group_edges(goff_a, mem, store, 0.7)
    edges = list(zip(np.frombuffer(a, np.uint32).tolist(), np.frombuffer(b, np.uint32).tolist(), strict=True))
    assert edges and all((min(e), max(e)) in cand_j for e in edges)
    rejected = [j for p, j in cand_j.items() if j < 0.7]
    print(
        f"{len(cand_j)} candidate pairs, {len(rejected)} below 0.7 (min {min(cand_j.values()):.3f}), {len(edges)} edges"
    )
    worst = min(jaccard(sets[x], sets[y]) for x, y in edges)
    assert worst >= 0.5, worst
    # the shingle sets kept for verification are the oracle's sets (up to 32-bit hashing)
    soff_a = np.frombuffer(soff, np.uint64)
    assert [int(soff_a[i + 1] - soff_a[i]) for i in range(50)] == [len(s) for s in sets[:50]]

    # and the same holds for the clusters: every member against the document it is kept for
    clusters = near_duplicates(corpus.texts)
    merged = [(int(c), i) for i, c in enumerate(clusters) if c != i]
    assert merged
    assert min(jaccard(sets[c], sets[i]) for c, i in merged) >= 0.5


def test_signature_error_matches_datasketch(corpus: Corpus, sets: list[frozenset[str]]) -> None:
    """Mean absolute error of the Jaccard estimate, over 5 seeds (one seed alone varies by ~7%)."""
    pairs = [(a, b) for a, b, _ in corpus.planted]
    pairs += [(i, i + 1) for i in range(0, 200, 2)]  # unrelated reviews: J near 0
    # variants of neighbouring bases, and of two bases apart: mid-range and low similarities
    pairs += [(corpus.planted[i][1], corpus.planted[i + 1][0]) for i in range(0, 200, 2)]
    pairs += [(corpus.planted[i][1], corpus.planted[i + 2][1]) for i in range(0, 200, 3)]
    docs = sorted({x for p in pairs for x in p})
    truth = np.array([jaccard(sets[a], sets[b]) for a, b in pairs])
    mae_ours, mae_theirs, bias = [], [], []
    for seed in range(1, 6):
        sigs = minhash_signatures(corpus.texts, num_perm=112, seed=seed)
        assert sigs.shape == (len(corpus.texts), 112) and sigs.dtype == np.uint32
        ds = {}
        for i in docs:
            m = datasketch.MinHash(num_perm=112, seed=seed)
            m.update_batch([s.encode() for s in sets[i]])
            ds[i] = m
        ours = np.array([(sigs[a] == sigs[b]).mean() for a, b in pairs])
        theirs = np.array([ds[a].jaccard(ds[b]) for a, b in pairs])
        mae_ours.append(np.abs(ours - truth).mean())
        mae_theirs.append(np.abs(theirs - truth).mean())
        bias.append((ours - truth).mean())
    assert np.mean(mae_ours) <= 1.10 * np.mean(mae_theirs), (mae_ours, mae_theirs)
    assert abs(np.mean(bias)) < 0.005, bias  # unbiased


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("num_perm", [64, 112, 128])
def test_threshold_picks_bands_like_datasketch(threshold: float, num_perm: int) -> None:
    assert _core.lsh_optimal_param(threshold, num_perm) == _optimal_param(threshold, num_perm, 0.5, 0.5)


def test_empty_short_and_huge_documents(data_dir: Path) -> None:
    book = (data_dir / "reference" / "books" / "tiny-shakespeare.txt").read_text()
    huge = (book * 10)[: 10 * 1024 * 1024]
    huge2 = huge.replace("KING", "QUEEN", 50)
    texts = ["", "", "word", "Word!", "other", " ,;: ", huge, huge2, "two words", "two words"]
    sigs = minhash_signatures(texts)
    assert (sigs[0] == 0xFFFFFFFF).all() and (sigs[5] == 0xFFFFFFFF).all()  # no shingles
    assert (sigs[2] == sigs[3]).all()  # one word: the whole document is one shingle
    assert not (sigs[2] == sigs[4]).any()
    c = near_duplicates(texts).tolist()
    assert c[0] == 0 and c[1] == 1 and c[5] == 5, "empty documents are never near duplicates"
    assert c[3] == 2 and c[4] == 4
    assert c[7] == 6 and c[9] == 8


def test_options_change_shingles_and_bad_options_are_errors() -> None:
    texts = ["The Cat sat on the mat today", "the cat sat on the mat today"]
    s = minhash_signatures(texts)
    assert (s[0] == s[1]).all()
    s = minhash_signatures(texts, lowercase=False)
    assert not (s[0] == s[1]).all()
    c = minhash_signatures(texts, ngram=3, unit="chars")
    assert (c[0] == c[1]).all() and not (c[0] == s[0]).all()
    assert not (minhash_signatures(texts, seed=2)[0] == minhash_signatures(texts, seed=1)[0]).all()
    with pytest.raises(ConfigError):
        minhash_signatures(texts, unit="sentences")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        near_duplicates(texts, bands=20, rows=8)
    with pytest.raises(ConfigError):
        near_duplicates(s, verify=True)


def test_signature_input_and_threshold(corpus: Corpus) -> None:
    sigs = minhash_signatures(corpus.texts[:400])
    from_sigs = near_duplicates(sigs)
    from_texts = near_duplicates(corpus.texts[:400], verify=False)
    assert (from_sigs == from_texts).all()
    loose = near_duplicates(corpus.texts, threshold=0.5)
    strict = near_duplicates(corpus.texts, threshold=0.9)
    assert len(np.unique(loose)) < len(np.unique(strict))


def test_same_result_with_one_thread(data_dir: Path) -> None:
    code = (
        "import sys, json; from pathlib import Path; from dedup_corpus import planted_corpus;"
        "from llmpipe.dedup import near_duplicates;"
        "c = planted_corpus(Path(sys.argv[1]), 100, 50); print(json.dumps(near_duplicates(c.texts).tolist()))"
    )
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(data_dir)], capture_output=True, text=True, check=True, env=env
    )
    small = planted_corpus(data_dir, 100, 50)
    assert json.loads(out.stdout) == near_duplicates(small.texts).tolist()
