"""`llmpipe eval` and llmpipe.eval against transformers' own loss, on a trained run and its export."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from llmpipe.cli import main
from llmpipe.eval import Evaluator, evaluate, load_lm, read_texts, windows

WEB = "web/cc-en-head-0091.jsonl"
LINES = [
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "KING HENRY:\nOnce more unto the breach, dear friends.",
    "A horse! a horse! my kingdom for a horse!",
]


def direct_bpb(hf_dir: Path, texts: list[str]) -> tuple[float, int, int]:
    """transformers' mean loss of [EOS] + text for texts that fit one window, as NLL, tokens and bytes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    nll, tokens, n_bytes = 0.0, 0, 0
    for t in texts:
        ids = torch.tensor([[tok.eos_token_id, *tok(t).input_ids]])
        assert ids.shape[1] <= model.config.max_position_embeddings
        with torch.no_grad():
            loss = model(ids, labels=ids).loss
        nll += float(loss) * (ids.shape[1] - 1)
        tokens += ids.shape[1] - 1
        n_bytes += len(t.encode())
    return nll / (math.log(2) * n_bytes), tokens, n_bytes


def test_bpb_of_hf_model_and_run_equal_transformers_loss(
    trained_run: Path, hf_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    want, tokens, n_bytes = direct_bpb(hf_export, LINES)
    data = tmp_path / "lines.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in LINES))
    got = {}
    for name, model in (("hf", hf_export), ("run", trained_run)):
        assert (
            main(["eval", str(model), "--text", str(data), "--json", "--batch-size", "2", "--device", "cpu"])
            == 0
        )
        got[name] = json.loads(capsys.readouterr().out)
        overall = got[name]["overall"]
        assert overall["tokens"] == tokens and overall["bytes"] == n_bytes and overall["docs"] == 3
        assert overall["bpb"] == pytest.approx(want, abs=1e-4)
        assert overall["ppl"] == pytest.approx(math.exp(overall["loss"]))
        # trained, not the initialisation: an untrained model spreads its guess over the 257 ids, log2(257)
        # = 8.006 bits per byte. Not a quality bound: 300 tiny steps reach ~3.7-3.9 bits on the val split,
        # and these three short lines, each scored from the EOS alone, land anywhere in ~3.8-4.3 with the
        # seed or the CPU's kernels (bf16 matmuls round differently on AVX2 and AVX-512: another run)
        assert 1.0 < overall["bpb"] < math.log2(257) - 2
    assert got["hf"]["overall"]["bpb"] == pytest.approx(got["run"]["overall"]["bpb"], abs=1e-4)


def test_max_docs_zero_reads_every_record(data_dir: Path) -> None:
    """``--max-docs 0`` (``read_texts(max_docs=0)``) means all of a JSONL file's records, as --help says,
    not the first one."""
    every = read_texts(data_dir / WEB)
    assert len(every) > 3
    assert read_texts(data_dir / WEB, max_docs=0) == every
    assert read_texts(data_dir / WEB, max_docs=3) == every[:3]


def test_long_documents_by_sliding_windows(hf_export: Path, data_dir: Path) -> None:
    """Web pages far longer than the 64-token window: the in-memory API on the HF model and on the
    trainer's model agree, every token is predicted once, and more context (smaller stride) helps."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    texts = read_texts(data_dir / WEB, max_docs=3)
    hf = AutoModelForCausalLM.from_pretrained(hf_export)
    r = evaluate(hf, texts, tokenizer=AutoTokenizer.from_pretrained(hf_export), batch_size=16)
    assert r.tokens == r.bytes == sum(len(t.encode()) for t in texts)  # byte-level tokenizer
    lm = load_lm(hf_export, device="cpu")
    ws = windows(lm.encode(texts), lm.prefix_id, 64)
    assert all(len(w.ids) <= 64 for w in ws) and sum(len(w.ids) - w.first for w in ws) == r.tokens
    assert len(ws) > 3 * len(texts)
    # windows by hand (stride 64: as lm-eval's rolling loglikelihood cuts them): transformers' log-probs
    ids = [lm.prefix_id, *lm.encode(texts[:1])[0]]
    for stride in (64, 16):
        nll, b = 0.0, 1  # predict ids[b:e] from at most 64 tokens ending at e - 1
        while b < len(ids):
            e = min(b + (64 if b == 1 else stride), len(ids))
            s = max(0, e - 65)
            x = torch.tensor([ids[s:e]])
            with torch.no_grad():
                logp = torch.log_softmax(hf(x).logits[0, :-1].float(), -1)
            pos = torch.arange(b - s - 1, e - s - 1)
            nll -= float(logp[pos, x[0, pos + 1]].sum())
            b = e
        got = Evaluator(lm, batch_size=4, stride=stride).texts(texts[:1])
        assert got.nll == pytest.approx(nll, rel=1e-5) and got.tokens == len(ids) - 1
    # the trainer's model in memory, with the llmpipe run's tokenizer
    from llmpipe.train.export_hf import load_run

    _, model, _ = load_run(Path(json.loads((hf_export / "llmpipe_export.json").read_text())["run"]))
    tok = Tokenizer.from_file(str(hf_export / "tokenizer.json"))
    r2 = evaluate(model, texts, tokenizer=tok, batch_size=5)
    assert r2.bpb == pytest.approx(r.bpb, abs=1e-5) and r2.tokens == r.tokens


def test_shards_val_split_and_bad_input(trained_run: Path, byte_shards: Path, tmp_path: Path) -> None:
    from llmpipe.config import load_yaml
    from llmpipe.train.config import from_saved

    lm = load_lm(trained_run, device="cpu")
    r = Evaluator(lm, batch_size=32).shards(byte_shards, max_samples=40)
    assert r.docs == 40 and r.tokens == 40 * 64
    assert 0 < r.bytes <= r.tokens  # EOS predicted but spells no bytes
    # the trainer's own val loss on these samples is the same measure
    val = [
        json.loads(x)["val_loss"]
        for x in (trained_run / "metrics.jsonl").read_text().splitlines()
        if "val_loss" in x
    ]
    assert abs(r.loss - val[-1]) < 0.3
    assert from_saved(load_yaml(trained_run / "config.yaml")).data.path == byte_shards
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "x"}\n')
    assert main(["eval", str(trained_run), "--text", str(bad)]) == 2
    assert main(["eval", str(tmp_path), "--text", str(bad)]) == 2
    assert main(["eval", str(trained_run)]) == 2
    assert np.isfinite(r.bpb)


def test_a_damaged_manifest_of_the_runs_shards_is_one_line(
    trained_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval and generate read the end-of-text id from the manifest of the shards the run trained on:
    a damaged one is one line naming it, not a traceback."""
    run, shards = tmp_path / "run", tmp_path / "shards"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("tensorboard"))
    shutil.copytree(byte_shards, shards)
    cfg = run / "config.yaml"
    assert str(byte_shards) in cfg.read_text()
    cfg.write_text(cfg.read_text().replace(str(byte_shards), str(shards)))
    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be, that is the question.\n")
    assert main(["eval", str(run), "--text", str(text)]) == 0  # the copy evaluates
    capsys.readouterr()
    for bad, says in (('{"format": 1', "not valid JSON"), ("[]", "not an llmpipe shard manifest")):
        (shards / "manifest.json").write_text(bad)
        assert main(["eval", str(run), "--text", str(text)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{shards / 'manifest.json'}: {says}" in err, err
        p = subprocess.run([sys.executable, "-m", "llmpipe.train.generate", str(run), "--prompt", "KING"],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr
    # the run's own config.yaml, not a mapping or without the sizes the trainer fills in
    for bad, says in (
        ("[]", "saved config: "),
        ("train: {steps: 3}", "model.vocab_size and model.max_seq_len"),
    ):
        cfg.write_text(bad)
        assert main(["eval", str(run), "--text", str(text)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, err


def test_a_damaged_tokenizer_of_a_model_directory_is_one_line(
    hf_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval and quantize read a model directory's tokenizer.json only once the tokenizers library
    loads it: a damaged one is one line, not transformers' or our own KeyError."""
    d = tmp_path / "hf"
    shutil.copytree(hf_export, d)
    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be, that is the question.\n")
    for bad in ("{x", "[]", '{"model": 5}'):
        (d / "tokenizer.json").write_text(bad)
        for argv in (["eval", str(d), "--text", str(text)], ["quantize", str(d), "--method", "q8_0"]):
            assert main([*argv, "--out", str(tmp_path / "q")] if argv[0] == "quantize" else argv) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "tokenizer is damaged" in err, (bad, argv[0], err)
            assert f"{d / 'tokenizer.json'}: not a tokenizer" in err, err


def test_lm_eval_harness_runs_a_local_task_on_the_export(
    hf_export: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lm_eval --model hf` on the export, a loglikelihood_rolling task from local files (no hub): its
    bits per byte equals `llmpipe eval`'s on the same documents."""
    import os
    import subprocess
    import sys

    from llmpipe.eval.harness import write_task

    docs = tmp_path / "docs.jsonl"
    texts = read_texts(data_dir / WEB, max_docs=4)
    docs.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    write_task(tmp_path / "tasks", "llmpipe_web", [docs])
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={hf_export}",
         "--include_path", str(tmp_path / "tasks"), "--tasks", "llmpipe_web", "--device", "cpu",
         "--batch_size", "8", "--output_path", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"][
        "llmpipe_web"
    ]
    assert main(["eval", str(hf_export), "--text", str(docs), "--json", "--device", "cpu"]) == 0
    ours = json.loads(capsys.readouterr().out)["overall"]
    assert results["bits_per_byte,none"] == pytest.approx(ours["bpb"], abs=1e-4)
    assert results["byte_perplexity,none"] == pytest.approx(2 ** ours["bpb"], rel=1e-4)
    assert results["word_perplexity,none"] > 1


def test_progress_is_a_line_every_few_seconds_in_a_log() -> None:
    """Not a terminal: no bar, one line per interval with the count, share, rate and ETA."""
    import io

    from llmpipe.progress import Progress

    out = io.StringIO()  # isatty() is False
    with Progress(40, "eval", "windows", every=0.0, stream=out) as bar:
        assert bar.bar is None
        for _ in range(4):
            bar.update(10)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[0].startswith("eval: 10 of 40 windows (25%), ") and "ETA" in lines[0]
    assert lines[-1].startswith("eval: 40 of 40 windows (100%)") and "ETA" not in lines[-1]
    quiet = io.StringIO()
    with Progress(40, "eval", "windows", every=60.0, stream=quiet) as bar:
        bar.update(40)
    assert quiet.getvalue() == ""  # a step shorter than the interval says nothing


def test_eval_shows_progress_and_no_third_party_warnings(
    hf_export: Path, trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`llmpipe eval` as a user runs it (its own process, stderr a pipe as in a log): progress lines on
    stderr, the table on stdout, and nothing else: no deprecation lines from torch/torchao/transformers."""
    import os
    import subprocess
    import sys

    data = tmp_path / "lines.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in LINES * 20))
    for model in (hf_export, trained_run):
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("llmpipe")), "eval", str(model), "--text", str(data),
             "--batch-size", "1", "--device", "cpu"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "LLMPIPE_PROGRESS_EVERY": "0"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "overall" in proc.stdout
        err = proc.stderr.splitlines()
        assert err and all(x.startswith("eval: ") and " of 60 windows" in x for x in err), proc.stderr
