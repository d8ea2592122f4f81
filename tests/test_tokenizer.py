"""llmpipe's BPE against the real peers: HF tokenizers and tiktoken as oracles, on real text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiktoken
from llmpipe.tokenizer import Tokenizer, TokenizerError
from tokenizer_texts import real_texts, write_corpus
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

VOCAB = 3000
EOS = "<|endoftext|>"
# tiktoken's own cl100k_base regex (llmpipe writes `\p{N}{1,3}` so that HF's Oniguruma agrees)
TIKTOKEN_CL100K = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""


@pytest.fixture(scope="module")
def texts(data_dir: Path) -> list[str]:
    return list(real_texts(data_dir))


@pytest.fixture(scope="module")
def corpus(texts: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("bpe") / "corpus.txt", texts)


def _hf_train(corpus: Path, pattern: str, out: Path) -> Path:
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train([str(corpus)], trainer)
    hf.save(str(out))
    return out


@pytest.fixture(scope="module", params=["gpt2", "cl100k", "o200k"])
def trained(request: pytest.FixtureRequest, corpus: Path) -> tuple[str, Tokenizer, Path, Path]:
    """(pattern, llmpipe tokenizer, its tokenizer.json, HF-trained tokenizer.json) on the same corpus."""
    ours = Tokenizer.train([corpus], VOCAB, pattern=request.param, min_frequency=2)
    ours_path = corpus.with_name(f"ours-{request.param}.json")
    ours.save(ours_path)
    hf_path = _hf_train(corpus, ours.pattern, corpus.with_name(f"hf-{request.param}.json"))
    return request.param, ours, ours_path, hf_path


def _hf_ids(hf: HFTokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def _no_literal_specials(texts: list[str]) -> list[str]:
    return [t for t in texts if EOS not in t]


def test_training_matches_hf_bpe_trainer(trained: tuple[str, Tokenizer, Path, Path]) -> None:
    """Same corpus, same settings: the same vocabulary and the same merges in the same order."""
    _, _, ours_path, hf_path = trained
    ours, hf = json.loads(ours_path.read_text())["model"], json.loads(hf_path.read_text())["model"]

    def merges(m: dict) -> list[tuple[str, str]]:
        return [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]

    assert len(ours["vocab"]) == VOCAB
    assert merges(ours) == merges(hf)
    assert ours["vocab"] == hf["vocab"]


def test_ids_identical_to_hf_for_llmpipe_trained_file(
    trained: tuple[str, Tokenizer, Path, Path], texts: list[str]
) -> None:
    _, ours, ours_path, _ = trained
    hf = HFTokenizer.from_file(str(ours_path))
    plain = _no_literal_specials(texts)
    assert ours.encode_batch(plain) == _hf_ids(hf, plain)
    # HF always treats added tokens in text as special: compare with allowed_special="all"
    assert ours.encode_batch(texts, allowed_special="all") == _hf_ids(hf, texts)
    # an Arrow column read in place by Rust (a sliced chunk and another): the same ids
    import pyarrow as pa

    half = len(plain) // 2
    col = pa.chunked_array([pa.array(["skipped", *plain[:half]]).slice(1), pa.array(plain[half:])])
    ids, offsets = ours.encode_column(col)
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)] == _hf_ids(hf, plain)


def test_ids_identical_to_hf_for_hf_trained_file(
    trained: tuple[str, Tokenizer, Path, Path], texts: list[str]
) -> None:
    _, _, _, hf_path = trained
    ours = Tokenizer.from_file(hf_path)
    hf = HFTokenizer.from_file(str(hf_path))
    assert ours.encode_batch(texts, allowed_special="all") == _hf_ids(hf, texts)
    assert ours.eos_id == hf.token_to_id(EOS)


def test_decode_encode_roundtrip(trained: tuple[str, Tokenizer, Path, Path], texts: list[str]) -> None:
    _, ours, _, _ = trained
    ids = ours.encode_batch(texts)
    assert ours.decode_batch(ids) == texts
    flat, offsets = ours.encode_batch_arrays(texts)
    assert len(offsets) == len(texts) + 1 and offsets[-1] == len(flat)
    # every text (the flat ids are built per chunk of texts and joined)
    assert [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))] == ids
    for i in (0, len(texts) // 2, len(texts) - 2):
        assert ours.decode(flat[offsets[i] : offsets[i + 1]]) == texts[i]


def test_literal_special_token_is_text_unless_allowed(trained: tuple[str, Tokenizer, Path, Path]) -> None:
    _, ours, _, _ = trained
    text = f"end{EOS}start"
    plain = ours.encode(text)
    assert ours.eos_id not in plain
    assert ours.decode(plain) == text
    special = ours.encode(text, allowed_special="all")
    assert special == ours.encode("end") + [ours.eos_id] + ours.encode("start")
    assert ours.encode(text, allowed_special={EOS}) == special
    with pytest.raises(TokenizerError):
        ours.encode(text, allowed_special={"<|nope|>"})


def test_lone_surrogates_do_not_crash(trained: tuple[str, Tokenizer, Path, Path]) -> None:
    _, ours, _, _ = trained
    assert ours.encode("a\ud800b") == ours.encode("a\ufffdb")
    assert ours.encode("x\udfffy\ud83d") == ours.encode("x\ufffdy\ufffd")
    assert ours.encode("\ud83d\ude00") == ours.encode("😀")  # a surrogate pair is its character
    assert ours.encode_batch(["ok", "bad\udc80"]) == [ours.encode("ok"), ours.encode("bad\ufffd")]
    flat, offsets = ours.encode_batch_arrays(["bad\udc80"])
    assert ours.decode(flat) == "bad\ufffd" and offsets.tolist() == [0, len(flat)]


def test_pathological_runs_are_encoded_and_match_hf(trained: tuple[str, Tokenizer, Path, Path]) -> None:
    """A million equal characters in one piece: the heap merge keeps this near linear."""
    _, ours, ours_path, _ = trained
    for ch in ("a", " ", "7", "é", "!", "\n"):
        text = ch * 1_000_000
        ids = ours.encode(text)
        assert ours.decode(ids) == text
    hf = HFTokenizer.from_file(str(ours_path))
    for text in ("a" * 20_000, "ab" * 10_000 + " " * 5_000 + "x", "é" * 10_000):
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids


def test_tiktoken_rank_file_gives_tiktoken_ids(
    trained: tuple[str, Tokenizer, Path, Path], texts: list[str], tmp_path: Path
) -> None:
    """A rank file from a trained vocabulary, loaded by llmpipe and by tiktoken (in process)."""
    name, ours, _, _ = trained
    ranks_path = tmp_path / "ranks.tiktoken"
    ours.save_tiktoken(ranks_path)
    ranks = {ours.id_to_bytes(i): i for i in range(1, ours.vocab_size)}
    pat = TIKTOKEN_CL100K if name == "cl100k" else ours.pattern
    enc = tiktoken.Encoding(f"test-{name}", pat_str=pat, mergeable_ranks=ranks, special_tokens={EOS: 0})
    loaded = Tokenizer.from_tiktoken(ranks_path, name, {EOS: 0})
    plain = _no_literal_specials(texts)
    assert loaded.encode_batch(plain) == enc.encode_ordinary_batch(plain)
    assert loaded.encode_batch(texts, allowed_special="all") == enc.encode_batch(texts, allowed_special="all")
    assert loaded.decode_batch(loaded.encode_batch(texts)) == texts


def test_loads_hf_default_bytelevel_file(corpus: Path, texts: list[str], tmp_path: Path) -> None:
    """HF's stock ByteLevel pre-tokenizer (use_regex=True) is the GPT-2 pattern."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train([str(corpus)], trainer)
    path = tmp_path / "hf-bytelevel.json"
    hf.save(str(path))
    ours = Tokenizer.from_file(path)
    assert ours.encode_batch(texts, allowed_special="all") == _hf_ids(hf, texts)


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match="not valid JSON"):
        Tokenizer.from_file(bad)
    wordpiece = tmp_path / "wp.json"
    wordpiece.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {}}}))
    with pytest.raises(TokenizerError, match="not BPE"):
        Tokenizer.from_file(wordpiece)


def test_curate_tokenizer_sample_is_the_first_documents_in_budget(tmp_path: Path, data_dir: Path) -> None:
    """The curate step trains on each kept document and a newline while the budget of UTF-8 bytes
    lasts, in order, counting words straight from the Arrow buffers: its tokenizer.json is, byte for
    byte, the one trained on a file of exactly that text (documents with inner, trailing and no
    newlines, trailing blanks, CRLF, empty ones)."""
    import pyarrow as pa
    from llmpipe.curate.settings import TokenizerConfig
    from llmpipe.curate.stages.tokenize import TrainTokenizer
    from llmpipe.curate.workdir import AtomicArrowWriter

    text = (data_dir / "reference" / "books" / "notre-dame-de-paris.txt").read_text(encoding="utf-8")
    paras = [p for p in text.split("\n\n") if p.strip()][:300]  # French: multi-byte characters
    odd = ["", "ends with a newline\n", "trailing blanks   ", "crlf line\r\nnext\r\n", "\n\n", "  lead"]
    paras = [x for k, p in enumerate(paras) for x in ([p, odd[k // 50]] if k % 50 == 7 else [p])]
    files = []
    for k in range(3):  # several work files (documents as a segment writes them), several batches each
        path = tmp_path / f"docs-{k}.arrow"
        part = paras[k * len(paras) // 3 : (k + 1) * len(paras) // 3]
        w = AtomicArrowWriter(path, pa.schema([("text", pa.large_string())]))
        for j in range(0, len(part), 25):
            w.write(pa.table({"text": pa.array(part[j : j + 25], pa.large_string())}))
        w.commit()
        files.append(path)
    total = sum(len(p.encode()) + 1 for p in paras)
    logs: list[str] = []
    for budget in (1, 5_000, 37_777, total - 1, total, 10 * total):
        want, left = bytearray(), budget
        for p in paras:
            if left <= 0:
                break
            want += p.encode() + b"\n"
            left -= len(p.encode()) + 1
        cfg = TokenizerConfig(
            vocab_size=30000, min_frequency=1, sample_bytes=budget, special_tokens=["<pad>"]
        )
        logs.clear()
        TrainTokenizer(cfg, logs.append).run(files, tmp_path / "tok.json")
        (tmp_path / "sample.txt").write_bytes(want)
        oracle = Tokenizer.train(
            [tmp_path / "sample.txt"], 30000, min_frequency=1, special_tokens=[EOS, "<pad>"]
        )
        assert (tmp_path / "tok.json").read_text() == oracle.to_json(), budget
        assert f"on {len(want):,} bytes of kept text" in logs[0]
        if oracle.vocab_size < 30000:  # too little text for the vocabulary asked: said so
            assert logs[1].startswith(f"tokenizer: note: the kept text gave only {oracle.vocab_size:,} of")
