"""model.arch=encoder: RoBERTa masking on real text, training with FSDP2 (fp16, a two-source mixture) and tp=2
(loss parallel, activation checkpointing) on 2 processes, exact resume, curated shards whose tokenizer reserves
<mask> (``llmpipe curate --special-tokens``), and the export as BertForMaskedLM (transformers' logits and loss
are the trainer's; fill-mask runs; the exported tokenizer's ids are the trainer's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import LITERAL_SPECIALS, ROOT, read_metrics, torchrun, train_losses
from llmpipe.config import load_yaml
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.errors import LlmpipeError
from llmpipe.tokenizer import Tokenizer
from llmpipe.train import mlm
from llmpipe.train.byte_shards import EOS, VOCAB, byte_tokenizer_json, write_byte_shards
from llmpipe.train.config import MlmConfig, from_saved
from llmpipe.train.export_hf import load_run
from llmpipe.train.mlm import Masker, word_starts

COMMON = [
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--model.arch=encoder", "--data.batch_size=4",
    "--train.log_every=1", "--train.val_every=0", "--train.val_batches=2", "--metrics.tensorboard=false",
]  # fmt: skip


@pytest.fixture(scope="module")
def encoder_run(byte_shards: Path, tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """12 steps of the tiny encoder on 2 processes, FSDP2 (full sharding), fp16 with the loss scaler, on a
    mixture of Shakespeare (0.7) and Alice (0.3), both byte shards of one tokenizer."""
    tmp = tmp_path_factory.mktemp("encoder")
    alice = write_byte_shards(
        data_dir / "reference" / "books" / "wonderland.txt", tmp / "alice", max_chars=60_000, val_fraction=0.1
    )
    run = tmp / "run"
    torchrun(2, "--data", f"plays={byte_shards}:0.7", "--data", f"alice={alice}:0.3", "--out", str(run),
             *COMMON, "--train.steps=12", "--parallel.mixed_precision=fp16")  # fmt: skip
    return run


def _batches(shards: Path, n: int, batch: int = 64) -> list:
    loader = TokenLoader(ShardDataset(shards, "train"), batch, seed=0, prefetch=1)
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_masking_statistics_on_real_text_and_layout_independence(byte_shards: Path) -> None:
    """Shakespeare's bytes: 15% of the non-EOS tokens chosen (within 0.5%), 80/10/10 among them, targets
    the original tokens; whole words all or nothing; the same masks whatever the split into ranks."""
    batches = _batches(byte_shards, 40)  # 40 x 64 rows x 64 tokens: 164k tokens
    starts = word_starts(byte_tokenizer_json(), VOCAB + 1)
    for whole_word in (False, True):
        m = Masker(MlmConfig(whole_word=whole_word), mask_id=VOCAB, eos_id=EOS, n_random=VOCAB, starts=starts)
        cand = chosen = masked = kept = 0
        for step, b in enumerate(batches):
            out = m(b, step, 0)
            ids = b.input.long()
            sel = out.target != -100
            assert torch.equal(out.target[sel], ids[sel])  # the loss predicts the original token
            assert not sel[ids == EOS].any()  # never EOS (separator and padding)
            assert torch.equal(out.input[~sel], b.input[~sel])  # nothing else changes
            cand += int((ids != EOS).sum())
            chosen += int(sel.sum())
            masked += int((out.input[sel] == VOCAB).sum())
            kept += int((out.input[sel] == ids[sel]).sum())
            if whole_word:  # a word (a run from a whitespace token to the next) is chosen whole
                for row_ids, row_sel in zip(ids[:8].tolist(), sel[:8].tolist(), strict=True):
                    word: list[bool] = []
                    for t, s in zip(row_ids, row_sel, strict=True):
                        if bool(starts[t]) or t == EOS:
                            assert len(set(word)) <= 1, (row_ids, row_sel)
                            word = []
                        if t != EOS:
                            word.append(s)
        rate = chosen / cand
        assert abs(rate - 0.15) < 0.005, (whole_word, rate)
        assert abs(masked / chosen - 0.8) < 0.01, masked / chosen
        # kept: the 10% left as they are, plus the random draws that hit the same token (1/257 of 10%)
        assert abs(kept / chosen - 0.1 - 0.1 / VOCAB) < 0.01, kept / chosen
        random = chosen - masked - kept
        assert abs(random / chosen - 0.1 * (1 - 1 / VOCAB)) < 0.01

    m = Masker(MlmConfig(), mask_id=VOCAB, eos_id=EOS, n_random=VOCAB)
    b = batches[0]
    whole = m(b, 7, 0)
    # the same global rows on 4 ranks of 16, or as accumulation micro-batches: identical masks
    for r in range(4):
        part = type(b)(b.input[16 * r : 16 * (r + 1)], b.target[16 * r : 16 * (r + 1)], None)
        assert torch.equal(m(part, 7, 16 * r).input, whole.input[16 * r : 16 * (r + 1)])
    assert not torch.equal(m(b, 8, 0).input, whole.input)  # another step (a later epoch): new masks
    assert not torch.equal(m.validation(b, 7, 0).input, whole.input)  # validation: its own stream
    assert torch.equal(m(b, 7, 0).input, whole.input)  # no hidden state


def test_encoder_trains_with_fsdp_and_exports_as_bert(
    encoder_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmpipe.cli import main
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    losses = train_losses(encoder_run)
    assert sorted(losses) == list(range(1, 13))
    assert losses[12] < losses[1] - 0.5, losses  # from ln 258 = 5.55 down
    logs = {r["step"]: r for r in read_metrics(encoder_run) if "loss" in r}
    # fp16: the loss scaler runs (no overflow at the initial scale on this model)
    assert all(r["skipped_steps"] == 0 and r["loss_scale"] > 0 for r in logs.values())
    # tokens/s and MFU count every input token (4 rows x 64 x 2 ranks), not the ~15% the loss predicts
    assert all(r["tokens"] == 4 * 64 * 2 for r in logs.values()), [r["tokens"] for r in logs.values()]
    # the mixture: both sources drawn at their weights, validation per source
    share = logs[12]["tokens/plays"] / (logs[12]["tokens/plays"] + logs[12]["tokens/alice"])
    assert logs[12]["tokens/alice"] > 0 and abs(share - 0.7) < 0.12, share
    assert any("val_loss/plays" in r and "val_loss/alice" in r for r in read_metrics(encoder_run))
    saved = (encoder_run / "config.yaml").read_text()
    assert "mask_token_id: 257" in saved and "vocab_size: 258" in saved  # <mask> added after the bytes + EOS

    out = tmp_path / "bert"
    assert main(["export", str(encoder_run), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"] and config["mask_token_id"] == 257
    hf = AutoModelForMaskedLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == "BertForMaskedLM"
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.mask_token == "<mask>" and tok.mask_token_id == 257
    _, ours, _ = load_run(encoder_run, encoder=True)
    with pytest.raises(LlmpipeError, match="an encoder run"):  # generate, quantize, prune: one line
        load_run(encoder_run)

    # a masked validation batch of packed rows, as the trainer scores it
    b = next(iter(TokenLoader(ShardDataset(byte_shards, "val"), 4, seed=0, prefetch=1)))
    m = Masker(MlmConfig(), mask_id=257, eos_id=EOS, n_random=VOCAB)
    mb = m.validation(b, 0, 0)
    ids, labels = mb.input.long(), mb.target.long()
    with torch.no_grad():
        want = ours(ids)  # the whole row attends (as BERT without a mask)
        got = hf(input_ids=ids, labels=labels)
        torch.testing.assert_close(got.logits, want, rtol=1e-4, atol=1e-4)
        trainer_loss = F.cross_entropy(want.flatten(0, 1), labels.flatten(), ignore_index=-100)
        torch.testing.assert_close(got.loss, trainer_loss, rtol=1e-5, atol=1e-5)
        # document masks: BERT given the block-diagonal mask [B, L, L] computes what the trainer does
        assert b.doc_ids is not None and int(b.doc_ids.max()) > 0  # rows hold several documents
        blocks = (b.doc_ids[:, :, None] == b.doc_ids[:, None, :]).long()
        masked_docs = hf(input_ids=ids, attention_mask=blocks).logits
        torch.testing.assert_close(masked_docs, ours(ids, b.doc_ids), rtol=1e-4, atol=1e-4)
        # bidirectional within a document, nothing across: change the last token of the row's first
        # document; every position of that document sees it (also earlier ones), no other position does
        row = int((b.doc_ids.max(dim=1).values > 0).nonzero()[0])
        first = b.doc_ids[row] == 0
        last = int(first.nonzero()[-1])
        changed = ids.clone()
        changed[row, last - 1] = (changed[row, last - 1] + 1) % VOCAB
        diff = (ours(changed, b.doc_ids) - ours(ids, b.doc_ids))[row].abs().amax(dim=-1)
        assert bool((diff[first] > 0).all()) and bool((diff[~first] == 0).all()), diff

    fill = pipeline("fill-mask", model=hf, tokenizer=tok, device="cpu")
    guesses = fill("To be, or not to b<mask>, that is the question", top_k=3)
    assert len(guesses) == 3 and all(g["sequence"].startswith("To be, or not to b") for g in guesses)

    # llmpipe eval: masked-LM loss on the val split, pseudo-perplexity on a text
    text = tmp_path / "t.txt"
    text.write_text("ROMEO:\nBut soft, what light through yonder window breaks?")
    capsys.readouterr()
    assert main(["eval", str(encoder_run), "--shards", str(byte_shards), "--text", str(text), "--json"]) == 0

    def no_nan(name: str) -> None:
        raise AssertionError(f"{name} in the JSON")

    inputs = json.loads(capsys.readouterr().out, parse_constant=no_nan)["inputs"]
    on_shards, on_text = inputs[f"{byte_shards} (val)"], inputs[str(text)]
    assert on_shards["bpb"] is None and on_shards["bytes"] == 0 and on_shards["loss"] > 0  # no bytes spelled
    assert on_text["bpb"] > 0 and on_text["bytes"] == len(text.read_bytes())
    assert main(["eval", str(encoder_run), "--shards", str(byte_shards)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.startswith(f"{byte_shards} (val)") and row.split()[-1] == "-" and "nan" not in row, row


def test_curated_special_tokens_tp2_resume_with_activation_checkpointing(
    special_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shards curated with ``--special-tokens mlm,t5``: the manifest lists the reserved ids, no ordinary text
    (literal "<mask>" included) encodes to them. On them, tp=2 (loss parallel) on 2 processes, whole-word
    masking on a real BPE, fp32: the run takes <mask> from the manifest (no new id, no vocabulary growth);
    killed after step 7 (checkpoint at 5) and resumed with activation checkpointing on, steps 6 and 7 give
    exactly the same losses (the same masks and data; recomputation changes nothing); the loss falls. The
    export's tokenizer has the trainer's <mask> and <pad> ids."""
    from llmpipe.cli import main
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    manifest = json.loads((special_shards / "manifest.json").read_text())
    reserved = manifest["tokenizer"]["special_tokens"]
    assert reserved["<mask>"] == 1 and reserved["<pad>"] == 2 and reserved["<extra_id_99>"] == 102
    assert len(reserved) == 102 and manifest["provenance"]["config"]["tokenizer"]["special_tokens"] == [
        "mlm",
        "t5",
    ]
    assert main(["inspect", str(special_shards)]) == 0
    assert "102 reserved special tokens: <mask> 1, <pad> 2, <extra_id_0> 3" in capsys.readouterr().out
    tok = Tokenizer.from_file(str(special_shards / "tokenizer.json"))
    assert {k: tok.special_tokens[k] for k in reserved} == reserved
    ds = ShardDataset(special_shards, "train")
    ids = np.concatenate([ds[i] for i in range(len(ds))]).astype(np.int64)
    # text never becomes a reserved id, a literal "<mask>" in a document neither
    assert len(ids) > 5000 and not ((ids >= 1) & (ids <= 102)).any()
    alice = " ".join(LITERAL_SPECIALS)
    assert tok.decode(tok.encode(alice)) == alice and not any(1 <= i <= 102 for i in tok.encode(alice))

    run = tmp_path / "tp"
    args = ["--data", str(special_shards), "--out", str(run), *COMMON, "--train.steps=12", "--parallel.tp=2",
            "--parallel.loss_parallel=true", "--mlm.whole_word=true", "--checkpoint.every=5", "--parallel.mixed_precision=fp32"]  # fmt: skip
    proc = torchrun(2, *args, "--debug.stop_after_step=7")
    assert "stopping as if killed" in proc.stdout
    first = train_losses(run)
    assert sorted(first) == list(range(1, 8))
    proc = torchrun(2, *args, "--parallel.activation_checkpointing=true")
    assert "resumed from" in proc.stdout and "at step 5" in proc.stdout
    resumed = train_losses(run)
    steps = [r["step"] for r in read_metrics(run) if "loss" in r]
    assert steps == [*range(1, 8), *range(6, 13)]
    rerun = [r["loss"] for r in read_metrics(run) if "loss" in r][7:9]
    assert rerun == [first[6], first[7]]  # the same masks, the same data: identical losses
    assert resumed[12] < resumed[1] - 0.3, resumed  # from ln 512 = 6.24 down
    assert all(r["tokens"] == 4 * 64 for r in read_metrics(run) if "loss" in r)  # one replica of 4 rows
    saved = (run / "config.yaml").read_text()
    assert "mask_token_id: 1\n" in saved and "vocab_size: 512\n" in saved  # the reserved id; nothing added
    # the run's masker: random replacements never draw a reserved token (<mask>, <pad>, sentinels) or EOS
    cfg = from_saved(load_yaml(run / "config.yaml"))
    masker = mlm.prepare(cfg, special_shards / "tokenizer.json", 512, 0, ds.special_tokens)
    assert masker is not None and masker.random_from == 103
    b = next(iter(TokenLoader(ds, 64, seed=0, prefetch=1)))
    out = masker(b, 3, 0)
    chosen = out.target != -100
    assert int(chosen.sum()) > 500 and int((out.input[chosen] == 1).sum()) > 400  # 80% become <mask>
    assert not ((out.input >= 2) & (out.input <= 102)).any() and not (out.input[~chosen] == 1).any()

    out = tmp_path / "bert"
    assert main(["export", str(run), "--out", str(out)]) == 0
    hf_tok = AutoTokenizer.from_pretrained(out)
    assert (hf_tok.mask_token, hf_tok.mask_token_id, hf_tok.pad_token_id) == ("<mask>", 1, 2)
    assert hf_tok("a <mask> b")["input_ids"].count(1) == 1  # HF's convention: fill-mask inputs name it
    hf = AutoModelForMaskedLM.from_pretrained(out, dtype=torch.float32)
    assert hf.config.vocab_size == 512 and hf.config.mask_token_id == 1 and hf.config.pad_token_id == 2


def test_plan_takes_the_encoder(capsys: pytest.CaptureFixture[str]) -> None:
    """`llmpipe plan --arch encoder` counts the encoder's parameters as the model has them."""
    from llmpipe.cli import main
    from llmpipe.plan import ModelShape
    from llmpipe.train.encoder import Encoder
    from llmpipe.train.model import ModelConfig, count_params
    from llmpipe.train.moe import MoEConfig

    for tie in (False, True):
        cfg = ModelConfig(arch="encoder", dim=64, n_layers=3, n_heads=4, vocab_size=258, max_seq_len=64,
                          tie_embeddings=tie)  # fmt: skip
        with torch.device("meta"):
            assert ModelShape.of(cfg).params == count_params(Encoder(cfg))
    tiny = str(ROOT / "configs/train/tiny.yaml")
    plans = []
    for arch in ("decoder", "encoder", "encoder_decoder"):
        assert main(["plan", "--config", tiny, "--arch", arch, "--vocab-size", "258", "--json"]) == 0
        plans.append(json.loads(capsys.readouterr().out))
    assert len({p["params"] for p in plans}) == 3, [p["params"] for p in plans]
    with pytest.raises(ValueError, match="model.arch=encoder has no mixture of experts"):
        ModelConfig(arch="encoder", dim=64, n_layers=2, n_heads=4, moe=MoEConfig(experts=4, top_k=2))
