"""Bits per byte on named text sets during training: in metrics.jsonl and TensorBoard, equal to
`llmpipe eval` of the same checkpoint on the same text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, read_metrics, torchrun
from llmpipe.eval import Evaluator, load_lm, read_texts


def test_bits_per_byte_every_n_steps(byte_shards: Path, data_dir: Path, tmp_path: Path) -> None:
    web = data_dir / "web" / "cc-en-head-0091.jsonl"
    book = tmp_path / "alice.txt"
    book.write_text((data_dir / "reference/books/wonderland.txt").read_text()[20_000:24_000])
    run = tmp_path / "run"
    torchrun(
        2, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
        "--train.steps=20", "--train.val_every=0", "--checkpoint.every=0", "--parallel.mixed_precision=fp32",
        "--eval.every=10", f"--eval.sets={{web: {web}, alice: {book}}}", "--eval.max_docs=3",
        timeout=600,
    )  # fmt: skip
    recs = [r for r in read_metrics(run) if "bpb/web" in r]
    assert [r["step"] for r in recs] == [0, 10, 20]
    assert all("bpb/alice" in r and "eval_loss/alice" in r for r in recs)
    assert recs[-1]["bpb/alice"] < recs[0]["bpb/alice"] - 1.0  # it learns English from Shakespeare
    ev = Evaluator(load_lm(run, device="cpu"))
    assert ev.texts(read_texts(web, max_docs=3)).bpb == pytest.approx(recs[-1]["bpb/web"], abs=1e-4)
    assert ev.texts([book.read_text()]).bpb == pytest.approx(recs[-1]["bpb/alice"], abs=1e-4)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("bpb/web")] == [0, 10, 20]
    # a bad set is one clear error before training
    proc = torchrun(
        1, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(tmp_path / "r2"),
        "--eval.every=5", "--eval.sets={x: /no/such/file.txt}", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "eval.sets.x" in proc.stderr
    assert json.loads(json.dumps(recs))  # plain JSON numbers
