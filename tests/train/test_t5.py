"""Encoder-decoder pretraining (model.arch=encoder_decoder, issue #31): T5 span corruption on real text,
a tiny T5 trained with FSDP2 and with tp=2 on two gloo processes, exact resume, and the export that
transformers' T5ForConditionalGeneration loads and runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, torchrun, train_losses
from llmpipe.data import ShardDataset, TokenLoader
from llmpipe.data.loader import epoch_permutation
from llmpipe.train.byte_shards import write_byte_shards
from llmpipe.train.span_corruption import SpanConfig, SpanCorruptionLoader, SpanCorruptor, noise_mask
from llmpipe.train.span_math import raw_length_for, span_lengths


def uncorrupt(enc: np.ndarray, labels: np.ndarray, first_sentinel: int, eos: int) -> list[int]:
    """The row back from the encoder's input and the targets: each sentinel replaced by its span."""
    spans: dict[int, list[int]] = {}
    current = -1
    for t in labels[:-1]:  # -100: padding of the row, not predicted
        if t >= first_sentinel:
            current = int(t) - first_sentinel
            spans[current] = []
        else:
            spans[current].append(int(t))
    assert labels[-1] == eos and enc[-1] == eos
    out: list[int] = []
    for t in enc[:-1]:
        out += spans.pop(int(t) - first_sentinel) if t >= first_sentinel else [int(t)]
    assert not spans  # every span placed once
    return out


def test_span_corruption_on_real_text(tmp_path: Path, data_dir: Path) -> None:
    # T5's arithmetic: HF's compute_input_and_target_lengths(512, 0.15, 3) is (568, 114)
    assert raw_length_for(512, 0.15, 3.0) == 568 and span_lengths(568, 0.15, 3.0).targets == 114
    shards = write_byte_shards(
        data_dir / "reference" / "books" / "wonderland.txt", tmp_path / "s", seq_len=511, max_chars=120_000
    )
    ds = ShardDataset(shards, "train")
    cfg = SpanConfig(extra_ids_from=257)
    corruptor = SpanCorruptor(cfg, ds.seq_len + 1, ds.eos_id, seed=7)
    n = corruptor.lengths
    loader = TokenLoader(ds, 4, seed=3, doc_ids=False, prefetch=1)
    perm = epoch_permutation(len(ds), 3, 0)
    noise = spans = raw = rows = 0
    run_lengths: list[int] = []
    batches = []
    for i, b in enumerate(SpanCorruptionLoader(loader, corruptor)):
        if i == 6:
            break
        batches.append(b)
        assert b.decoder_input is not None
        assert b.input.shape == (4, n.inputs) and b.target.shape == (4, n.targets)
        assert (b.decoder_input[:, 0] == cfg.extra_ids_from).all()  # <pad> starts the decoder
        assert torch.equal(b.decoder_input[:, 1:], b.target[:, :-1].clamp(min=0))
        for r in range(4):
            enc, lab = b.input[r].numpy(), b.target[r].numpy()
            original = ds[int(perm[i * 4 + r])]  # the row of the shards, by its place in the order
            back = np.array(uncorrupt(enc, lab, corruptor.first_sentinel, ds.eos_id))
            assert np.array_equal(np.where(back == -100, original, back), original)
            sentinels = int((enc >= corruptor.first_sentinel).sum())
            assert sentinels == int((lab >= corruptor.first_sentinel).sum())
            noise += len(lab) - 1 - sentinels
            spans += sentinels
            raw += len(original)
            rows += 1
        for r in range(4):  # the masks of these rows (keyed by epoch and place in the order)
            mask = noise_mask(n, corruptor.rng((0, 0, i * 4 + r)))
            edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])))
            run_lengths += (edges[1::2] - edges[::2]).tolist()
    assert abs(noise / raw - 0.15) <= 0.005, noise / raw
    assert abs(noise / spans - 3.0) <= 0.15, noise / spans
    assert abs(np.mean(run_lengths) - 3.0) <= 0.15 and len(set(run_lengths)) > 3  # random lengths
    # resume: a loader restored after batch 2 hands out batches 3.. again, mask for mask
    first = TokenLoader(ds, 4, seed=3, doc_ids=False, prefetch=1)
    it = iter(SpanCorruptionLoader(first, corruptor))
    next(it), next(it)
    again = TokenLoader(ds, 4, seed=3, doc_ids=False, prefetch=1)
    again.load_state_dict(first.state_dict())
    b = next(iter(SpanCorruptionLoader(again, corruptor)))
    assert torch.equal(b.input, batches[2].input) and torch.equal(b.target, batches[2].target)
    # another layout: two ranks of 2 rows see the same rows, corrupted the same way
    halves = [
        next(
            iter(
                SpanCorruptionLoader(
                    TokenLoader(ds, 2, rank=r, world_size=2, seed=3, doc_ids=False), corruptor
                )
            )
        )
        for r in range(2)
    ]
    assert torch.equal(torch.cat([h.input for h in halves]), batches[0].input)


TRAIN = (
    "--config", str(ROOT / "configs/train/tiny.yaml"), "--model.arch=encoder_decoder", "--train.steps=8",
    "--train.log_every=1", "--train.val_every=0", "--train.val_batches=2", "--optim.warmup_steps=2",
    "--checkpoint.every=4", "--checkpoint.keep=2", "--metrics.tensorboard=false",
)  # fmt: skip


@pytest.fixture(scope="module")
def t5_run(byte_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 steps of a tiny T5 with FSDP2 on two gloo processes (2 rows each)."""
    run = tmp_path_factory.mktemp("t5") / "fsdp"
    torchrun(
        2, "train/pretrain.py", "--data", str(byte_shards), "--out", str(run), *TRAIN, "--data.batch_size=2"
    )
    return run


def test_t5_trains_with_fsdp_and_tp_and_resumes_exactly(
    t5_run: Path, byte_shards: Path, tmp_path: Path
) -> None:
    fsdp = train_losses(t5_run)
    assert sorted(fsdp) == list(range(1, 9))
    assert max(fsdp[7], fsdp[8]) < fsdp[1] - 1.0, fsdp  # the loss falls
    saved = (t5_run / "config.yaml").read_text()
    assert "extra_ids_from: 257" in saved and "vocab_size: 261" in saved  # <pad> + 3 sentinels, recorded
    # tp=2 with loss parallel (cross entropy on vocabulary-sharded logits): the same 4 rows a step on one
    # replica; the same weights at step 0, so the same first loss
    tp = tmp_path / "tp"
    torchrun(2, "--data", str(byte_shards), "--out", str(tp), *TRAIN, "--data.batch_size=4",
             "--parallel.tp=2", "--parallel.loss_parallel=true", "--checkpoint.every=0")  # fmt: skip
    tp_losses = train_losses(tp)
    assert abs(tp_losses[1] - fsdp[1]) < 0.03, (tp_losses[1], fsdp[1])
    assert max(tp_losses[7], tp_losses[8]) < tp_losses[1] - 1.0, tp_losses
    # resume from the step-4 checkpoint: the same masks, the same losses as the uninterrupted run
    cut = tmp_path / "cut"
    shutil.copytree(t5_run, cut)
    shutil.rmtree(cut / "checkpoints" / "step-00000008")
    proc = torchrun(2, "train/pretrain.py", "--data", str(byte_shards), "--out", str(cut), *TRAIN,
                    "--data.batch_size=2")  # fmt: skip
    assert "at step 4" in proc.stdout
    resumed = train_losses(cut)
    assert all(resumed[s] == fsdp[s] for s in range(5, 9)), (resumed, fsdp)


def test_t5_export_eval_plan(
    t5_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmpipe.cli import main
    from llmpipe.config import load_yaml
    from llmpipe.train.config import from_saved
    from llmpipe.train.export_t5 import every_row, load_t5
    from llmpipe.train.model import count_params
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    out = tmp_path / "hf"
    assert main(["export", str(t5_run), "--out", str(out)]) == 0
    hf = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    assert type(hf).__name__ == "T5ForConditionalGeneration"
    assert tok.convert_tokens_to_ids(["<pad>", "<extra_id_0>", "<extra_id_2>"]) == [257, 258, 260]
    cfg = from_saved(load_yaml(t5_run / "config.yaml"))
    model, _ = load_t5(cfg, t5_run)
    ds = ShardDataset(byte_shards, "val")
    corruptor = SpanCorruptor(cfg.span, ds.seq_len + 1, ds.eos_id, cfg.data.seed)
    total, count = 0.0, 0
    with torch.no_grad():
        for i, b in enumerate(every_row(ds, corruptor, 256)):  # every val row, as llmpipe eval scores them
            ours = model(b.input, b.decoder_input)
            theirs = hf(input_ids=b.input.long(), labels=b.target.long())  # HF shifts the labels itself
            if i == 0:
                assert torch.allclose(ours, theirs.logits, atol=1e-4, rtol=0), (
                    (ours - theirs.logits).abs().max()
                )
                loss = F.cross_entropy(ours.flatten(0, 1), b.target.long().flatten())
                assert abs(float(theirs.loss) - float(loss)) < 1e-5, (float(theirs.loss), float(loss))
            total += float(theirs.loss) * int((b.target != -100).sum())
            count += int((b.target != -100).sum())
    # llmpipe eval: the span-corruption loss of the run on the val split, as transformers computes it
    capsys.readouterr()
    assert main(["eval", str(t5_run), "--shards", str(byte_shards), "--json", "--batch-size", "256"]) == 0
    report = json.loads(capsys.readouterr().out)
    (r,) = report["inputs"].values()
    assert report["objective"] == "span_corruption" and r["rows"] == len(ds) and r["tokens"] == count
    assert abs(r["loss"] - total / count) < 1e-4, (r["loss"], total / count)
    # generate on the export: a sentinel in, the span it stands for out
    x = tok(["ROMEO: To be or <extra_id_0> to be."], return_tensors="pt")
    assert 258 in x.input_ids[0].tolist()
    gen = hf.generate(**x, max_new_tokens=8, do_sample=False)
    assert gen[0, 0] == 257 and gen.shape[1] > 1
    # llmpipe plan: both stacks' parameters, as the trainer's model counts them
    assert (
        main(
            [
                "plan",
                "--config",
                str(t5_run / "config.yaml"),
                "--seq-len",
                "64",
                "--micro-batch",
                "2",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    with torch.device("meta"):
        assert plan["params"] == count_params(type(model)(cfg.model))
    assert plan["train_flops"] > 0 and plan["memory_gb"]["activations"] > 0


def test_t5_takes_the_sentinels_the_shards_reserve(
    special_shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards curated with ``--special-tokens mlm,t5`` reserve <pad> (2) and <extra_id_0..99> (3..102): a run
    (one process) uses those ids instead of appending new ones, and the export's tokenizer names them at
    the trainer's ids. Reserved sentinels that do not fit span corruption are refused in one line."""
    from conftest import free_port
    from llmpipe.cli import main
    from llmpipe.config import load_yaml
    from llmpipe.errors import ConfigError
    from llmpipe.train import t5
    from llmpipe.train.config import from_saved
    from llmpipe.train.pretrain import main as train
    from transformers import AutoConfig, AutoTokenizer

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    run = tmp_path / "run"
    args = ["--data", str(special_shards), "--out", str(run), *TRAIN, "--train.steps=3", "--data.batch_size=4",
            "--checkpoint.every=0", "--parallel.mixed_precision=fp32"]  # fmt: skip
    assert train(args) == 0
    cfg = from_saved(load_yaml(run / "config.yaml"))
    assert cfg.span.extra_ids_from == 2 and cfg.model.vocab_size == 512  # the reserved ids; nothing added
    losses = train_losses(run)
    assert sorted(losses) == [1, 2, 3] and all(5.0 < x < 7.0 for x in losses.values())  # ln 512 = 6.24

    out = tmp_path / "hf"
    assert main(["export", str(run), "--out", str(out)]) == 0
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.convert_tokens_to_ids(["<pad>", "<extra_id_0>", "<extra_id_2>", "<extra_id_99>"]) == [
        2,
        3,
        5,
        102,
    ]
    assert tok.pad_token_id == 2 and tok.additional_special_tokens[:3] == [
        "<extra_id_0>",
        "<extra_id_1>",
        "<extra_id_2>",
    ]
    assert len(tok.additional_special_tokens) == 100 and len(tok) == 512
    hf = AutoConfig.from_pretrained(out)
    assert (hf.vocab_size, hf.pad_token_id, hf.decoder_start_token_id) == (512, 2, 2)

    reserved = {"<pad>": 7, "<extra_id_0>": 8, "<extra_id_1>": 9}  # rows of 65 tokens need 3 sentinels
    with pytest.raises(ConfigError, match="needs 3 sentinels; the shards reserve 2"):
        t5.prepare(from_saved(load_yaml(run / "config.yaml")), 512, 64, 0, reserved)
    with pytest.raises(ConfigError, match="reserve <pad> but no sentinels"):  # shards curated for mlm only
        t5.prepare(cfg, 512, 64, 0, {"<mask>": 1, "<pad>": 2})
    with pytest.raises(ConfigError, match="consecutive ids"):
        t5.prepare(cfg, 512, 64, 0, {**reserved, "<extra_id_1>": 20, "<extra_id_2>": 21})
