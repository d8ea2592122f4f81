"""Compression on a model trained here on real text: PTQ (int8, int8-dynamic, int4, NF4, GPTQ), QAT in
the trainer, pruning (magnitude, Wanda; unstructured, 2:4, neurons) with masks held through fine-tuning
and resume, the compression report, and `llmpipe plan --precision int8|int4` against measured sizes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, torchrun
from llmpipe.cli import main as llmpipe
from llmpipe.errors import InputError
from llmpipe.train.checkpoint import STATE_FILE, list_checkpoints


@pytest.fixture(scope="module")
def base_run(byte_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("compress") / "run"
    torchrun(
        2, "--data", str(byte_shards), "--config", str(ROOT / "configs/train/tiny.yaml"), "--out", str(run),
        "--train.steps=150", "--train.val_every=0", "--checkpoint.every=100", "--checkpoint.keep=2",
        "--metrics.tensorboard=false",
    )  # fmt: skip
    return run


def _report(out: Path) -> dict:
    return json.loads((out / "compression_report.json").read_text())


def _quantize(model: Path, method: str, out: Path, *extra: str) -> dict:
    """llmpipe's own format: the embedding and output head quantized too (the compressed-tensors and
    GGUF outputs are checked against their loaders in test_quant_formats.py)."""
    argv = ["quantize", str(model), "--method", method, "--format", "llmpipe", "--out", str(out)]
    assert llmpipe([*argv, "--eval-rows", "16", *extra]) == 0
    assert (out / "compression_report.txt").read_text().startswith(method)
    return _report(out)


def test_int8_and_int4_sizes_quality_and_gptq_beats_rtn(base_run: Path, tmp_path: Path) -> None:
    int8 = _quantize(base_run, "int8", tmp_path / "int8")
    assert int8["size_ratio"] <= 0.27, int8["size_bytes"]
    assert abs(int8["bpb_change"]) < 0.01, (int8["before"], int8["after"])
    int4 = _quantize(base_run, "int4", tmp_path / "int4")
    assert int4["size_ratio"] <= 0.16, int4["size_bytes"]
    assert int4["bpb_change"] > 0  # degradation, reported
    gptq = _quantize(base_run, "gptq-int4", tmp_path / "gptq", "--calib-seqs", "32")
    assert gptq["size_bytes"]["weights"] == int4["size_bytes"]["weights"]  # the same bits
    assert gptq["after"]["bpb"] < int4["after"]["bpb"], (gptq["after"], int4["after"])
    assert gptq["calibration_seqs"] == 32


@pytest.mark.parametrize("method", ["int8", "int8-dynamic", "int4", "nf4", "gptq-int4"])
def test_saved_model_loads_back_with_the_same_outputs(
    base_run: Path, byte_shards: Path, tmp_path: Path, method: str
) -> None:
    from llmpipe.compress.calib import calibration_tokens
    from llmpipe.compress.model_io import hf_config_of, load_model
    from llmpipe.compress.quantize import quantize_model
    from llmpipe.compress.spec import QuantSpec
    from llmpipe.compress.store import load_quantized, save_quantized

    loaded = load_model(base_run)
    ids = calibration_tokens(byte_shards, 4, seed=1, split="val")
    with torch.no_grad():
        fp32 = loaded.model(ids)
    spec = QuantSpec(method, 32)  # type: ignore[arg-type]
    calib = calibration_tokens(byte_shards, 8) if method == "gptq-int4" else None
    model = quantize_model(loaded.model, spec, calib)
    save_quantized(model, spec, tmp_path / "q", hf_config_of(model, loaded), loaded.tokenizer)
    back, back_spec = load_quantized(tmp_path / "q")
    assert back_spec == spec
    with torch.no_grad():
        want, got = model(ids), back(ids)
    assert torch.equal(got, want)
    assert not torch.equal(got, fp32)  # really quantized
    assert (got.argmax(-1) == fp32.argmax(-1)).float().mean() > 0.9
    if method != "int4":
        return
    # a hand-edited listing is one line naming the file, whatever it breaks
    listing = tmp_path / "q" / "quantization.json"
    doc = json.loads(listing.read_text())
    first = next(iter(doc["tensors"]))
    for bad, says in (
        ("{x", "not valid JSON"),
        ({**doc, "method": "int9"}, "method 'int9' with group_size 32 is not a quantization of llmpipe's"),
        ({**doc, "group_size": "32"}, "method 'int4' with group_size '32'"),
        ({**doc, "tensors": 5}, "its tensors do not describe"),
        ({**doc, "tensors": {first: {"kind": "packed"}}}, "its tensors do not describe"),
    ):
        listing.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(InputError) as e:
            load_quantized(tmp_path / "q")
        assert f"{listing}: " in str(e.value) and says in str(e.value), str(e.value)


def test_qat_int4_beats_ptq_int4_of_the_same_model(base_run: Path, tmp_path: Path) -> None:
    qat = tmp_path / "qat"
    shutil.copytree(base_run, qat)  # the same model, trained on for 30 steps with int4 fake quantization
    torchrun(
        2, "--config", str(qat / "config.yaml"), "--out", str(qat), "--train.steps=180", "--qat.scheme=int4",
        "--qat.group_size=64", "--qat.from_step=150", "--checkpoint.every=0",
    )  # fmt: skip
    assert [p.name for p in list_checkpoints(qat / "checkpoints")][-1] == "step-00000180"
    ptq = _quantize(base_run, "int4", tmp_path / "ptq")
    converted = tmp_path / "converted"  # the run's qat section selects the conversion: int4, group 64
    assert (
        llmpipe(["quantize", str(qat), "--out", str(converted), "--format", "llmpipe", "--eval-rows", "16"])
        == 0
    )
    rep = _report(converted)
    assert rep["method"] == "int4" and rep["group_size"] == 64
    assert rep["after"]["bpb"] < ptq["after"]["bpb"], (rep["after"], ptq["after"])
    # and the QAT model lost less to quantization than the PTQ model did
    assert rep["bpb_change"] < ptq["bpb_change"], (rep["bpb_change"], ptq["bpb_change"])


def test_bad_requests_are_one_line_errors(
    base_run: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmpipe.train.byte_shards import write_byte_shards

    # shards without a val split, as a curate config without pack.val_fraction (configs/curate/web.yaml)
    # or with too few samples for one writes them: what to evaluate on is said, not a row of nan
    no_val = write_byte_shards(
        data_dir / "reference" / "books" / "tiny-shakespeare.txt", tmp_path / "no-val", max_chars=20_000,
        val_fraction=0.0,
    )  # fmt: skip
    not_a_model = tmp_path / "not-a-model"  # beside --out: an --out inside the model is refused first
    not_a_model.mkdir()
    empty_split = f"{no_val}: its val split holds no samples (curate puts every 1/pack.val_fraction-th sample"
    assert llmpipe(["eval", str(base_run), "--shards", str(no_val)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and empty_split in err, err
    assert err.endswith("pass --shards DIR with a val split, or --split train"), err
    cases = [
        (
            ["quantize", str(base_run), "--method", "int8", "--eval", str(no_val)],
            f"{empty_split} in val: none with val_fraction 0, or with fewer samples than that); pass --eval DIR",
        ),
        (
            ["prune", str(base_run), "--sparsity", "0.5", "--eval", str(no_val)],
            "pass --eval DIR: shards with a val split",
        ),
        (["quantize", str(base_run), "--method", "int4", "--group-size", "48"], "does not divide"),
        (["prune", str(base_run), "--sparsity", "1.5"], "(0, 1)"),
        (["prune", str(base_run), "--sparsity", "0"], "(0, 1)"),
        (["prune", str(base_run), "--structure", "2:4", "--sparsity", "0.3"], "2:4 means sparsity 0.5"),
        (["quantize", str(not_a_model), "--method", "int8"], "neither a run directory"),
    ]
    for argv, want in cases:
        assert llmpipe([*argv, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and want in err, err
        assert not (tmp_path / "x").exists()


def test_magnitude_pruning_fine_tuning_and_masks_through_resume(
    base_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmpipe.compress.model_io import load_model
    from llmpipe.compress.prune import sparsity_of
    from safetensors.torch import load_file

    pruned = tmp_path / "pruned"
    assert llmpipe(["prune", str(base_run), "--sparsity", "0.5", "--out", str(pruned), "--eval-rows", "16",
                    "--finetune", "20", "--lr", "1e-3"]) == 0  # fmt: skip
    rep = _report(pruned)
    assert abs(rep["sparsity"] - 0.5) <= 0.005
    assert rep["after"]["bpb"] < rep["bpb_pruned_before_finetune"], rep  # fine-tuning recovers
    stages = rep["bpb_stages"]  # every stage's figure, in the JSON and the text
    assert stages == {"original": rep["before"]["bpb"], "pruned": rep["bpb_pruned_before_finetune"],
                      "finetuned": rep["after"]["bpb"]}  # fmt: skip
    assert rep["finetune_made_worse"] is False and rep["finetune_kept_step"] > 0
    assert set(rep["finetune_val_loss"]) == {str(k) for k in range(0, 21, 2)}
    text = (pruned / "compression_report.txt").read_text()
    assert f"pruned (before fine-tuning) {stages['pruned']:.4f}" in text and "WARNING" not in text
    err = capsys.readouterr().err.splitlines()  # the trainer's step lines streamed (stderr is no terminal)
    assert [x for x in err if x.startswith("finetune: step     20 | loss")], err
    masks = load_file(str(pruned / "masks.safetensors"))
    tuned = load_model(pruned).model
    assert abs(sparsity_of(tuned) - 0.5) <= 0.005
    for name, mask in masks.items():  # every pruned weight is still exactly zero after 20 AdamW steps
        w = tuned.get_submodule(name.removesuffix(".weight")).weight
        assert bool((w[~mask] == 0).all()) and bool((w[mask] != 0).all()), name

    # masks survive a resume: continue the fine-tuning run for 10 more steps on one rank, without
    # init.from_hf, so the masks can only come from the checkpoint's train state
    run = tmp_path / "pruned-finetune"
    state = torch.load(list_checkpoints(run / "checkpoints")[-1] / STATE_FILE, weights_only=False)
    assert set(state["compression"]["masks"]) == set(masks)
    torchrun(
        1,
        "--config",
        str(run / "config.yaml"),
        "--out",
        str(run),
        "--train.steps=30",
        "--init.from_hf=null",
    )
    assert list_checkpoints(run / "checkpoints")[-1].name == "step-00000030"
    final = load_model(run).model
    for name, mask in masks.items():
        w = final.get_submodule(name.removesuffix(".weight")).weight
        assert bool((w[~mask] == 0).all()), name
    assert abs(sparsity_of(final) - 0.5) <= 0.005

    # a second prune into the same --out starts its fine-tuning over: resuming the run above (step 30,
    # the 0.5 masks) would leave its masks and weights in a model reported as 0.3-sparse
    assert llmpipe(["prune", str(base_run), "--sparsity", "0.3", "--out", str(pruned), "--eval-rows", "16",
                    "--finetune", "4", "--lr", "1e-3"]) == 0  # fmt: skip
    assert list_checkpoints(run / "checkpoints")[-1].name == "step-00000004"  # not step 30
    assert abs(_report(pruned)["sparsity"] - 0.3) <= 0.005
    assert abs(sparsity_of(load_model(pruned).model) - 0.3) <= 0.005


def test_finetune_run_directory_is_checked_before_any_work(
    base_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OUT-finetune, where --finetune trains, never holds a user's files or an input: refused in one
    line before anything is written (it is replaced when a fine-tuning starts), even with --overwrite."""
    (tmp_path / "a-finetune").mkdir()
    (tmp_path / "a-finetune" / "notes.txt").write_text("mine")
    (tmp_path / "b-finetune").symlink_to(base_run)  # the model, reached through a link
    (tmp_path / "c-finetune").symlink_to(tmp_path / "a-finetune")
    cases = [
        (str(base_run), "a", "--finetune's run directory", "holds files llmpipe did not write (notes.txt)"),
        (str(tmp_path / "b-finetune"), "b", "--finetune's run directory", "is the model"),
        (str(base_run), "c", "--finetune's run directory", "is a link or a file"),
    ]
    for model, out, where, why in cases:
        for extra in ([], ["--overwrite"]):
            argv = ["prune", model, "--sparsity", "0.5", "--finetune", "2", "--out", str(tmp_path / out)]
            assert llmpipe([*argv, *extra]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and where in err and why in err, err
            assert not (tmp_path / out).exists()
    assert (tmp_path / "a-finetune" / "notes.txt").read_text() == "mine"
    assert list_checkpoints(base_run / "checkpoints")


def test_wanda_2_4_holds_in_every_group_of_four(base_run: Path, tmp_path: Path) -> None:
    from llmpipe.compress.model_io import load_model
    from llmpipe.compress.prune import prunable

    out = tmp_path / "w24"
    assert llmpipe(["prune", str(base_run), "--method", "wanda", "--structure", "2:4", "--out", str(out),
                    "--eval-rows", "16"]) == 0  # fmt: skip
    model = load_model(out).model
    for name in prunable(model):
        w = model.get_submodule(name).weight
        zeros = (w.reshape(w.shape[0], -1, 4) == 0).sum(-1)
        assert bool((zeros >= 2).all()), name
    rep = _report(out)
    assert rep["sparsity"] == pytest.approx(0.5, abs=1e-3)
    assert rep["after"]["bpb"] < 8.0  # still a language model, not noise (uniform: 8 bits per byte)


def test_neuron_pruned_model_is_smaller_and_loads_in_transformers(base_run: Path, tmp_path: Path) -> None:
    from llmpipe.compress.model_io import load_model
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    out = tmp_path / "neurons"
    assert llmpipe(["prune", str(base_run), "--structure", "neurons", "--sparsity", "0.25", "--out", str(out),
                    "--eval-rows", "16"]) == 0  # fmt: skip
    cfg = json.loads((out / "config.json").read_text())
    rep = _report(out)
    assert cfg["intermediate_size"] == rep["hidden"]["after"] == 144 < rep["hidden"]["before"] == 192
    assert rep["size_bytes"]["weights"] < rep["size_bytes"]["fp32_weights"]
    hf = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    ours = load_model(out).model
    ids = torch.tensor(
        [Tokenizer.from_file(str(out / "tokenizer.json")).encode("KING RICHARD:\nNow is the").ids]
    )
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, ours(ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_plan_matches_the_measured_quantized_size(
    base_run: Path, tmp_path: Path, precision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmpipe.compress.model_io import load_model
    from llmpipe.compress.spec import targets

    model = load_model(base_run).model
    n = sum(p.numel() for p in model.parameters())
    assert (
        sum(m.weight.numel() for _, m in targets(model)) > 0.99 * n
    )  # what the plan counts is what is quantized
    rep = _quantize(base_run, precision, tmp_path / precision)
    capsys.readouterr()
    assert (
        llmpipe(["plan", "--params", str(n), "--precision", precision, "--trainable-fraction", "0", "--json"])
        == 0
    )
    planned = json.loads(capsys.readouterr().out)["memory_gb"]["weights"] * 1e9
    measured = rep["size_bytes"]["weights"]
    assert planned == pytest.approx(measured, rel=0.1), (planned, measured)


def test_report_shows_every_stage_and_says_when_fine_tuning_made_it_worse(tmp_path: Path) -> None:
    from llmpipe.compress.report import build_report, summary

    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    speed = {"latency_ms": 2.0, "tokens_per_s": 100.0, "seq_len": 64}

    def report(tuned: float, kept: int) -> dict:
        return build_report(
            method="prune-magnitude-unstructured", source=tmp_path / "run", out=tmp_path,
            weights_file=tmp_path / "model.safetensors", baseline_weights_bytes=100,
            before={"bpb": 3.18, **speed}, after={"bpb": tuned, **speed},
            extra={"bpb_pruned_before_finetune": 3.20, "finetune_steps": 200, "finetune_kept_step": kept},
        )  # fmt: skip

    worse = report(3.67, 200)
    assert worse["bpb_stages"] == {"original": 3.18, "pruned": 3.20, "finetuned": 3.67}
    assert worse["finetune_made_worse"] is True
    text = summary(worse)
    assert "original 3.1800" in text and "pruned (before fine-tuning) 3.2000 (+0.63% vs original)" in text
    assert "fine-tuned 200 steps 3.6700 (+15.41% vs original, +14.69% vs pruned)" in text
    assert "WARNING: fine-tuning made the model worse (3.2000 -> 3.6700 bits/byte)" in text
    better = summary(report(3.19, 120))
    assert (
        "fine-tuned 200 steps (kept step 120: the best validation) 3.1900" in better
        and "WARNING" not in better
    )
    kept = summary(report(3.20, 0))
    assert "NOTE: fine-tuning never validated better than the pruned model" in kept
    plain = summary(build_report(
        method="int8", source=tmp_path, out=tmp_path, weights_file=tmp_path / "model.safetensors",
        baseline_weights_bytes=100, before={"bpb": 3.0, **speed}, after={"bpb": 3.03, **speed},
    ))  # fmt: skip
    assert "bits/byte 3.0000 -> 3.0300 (+1.00%)" in plain and "pruned" not in plain


def test_quantize_and_prune_show_progress_and_no_third_party_warnings(base_run: Path, tmp_path: Path) -> None:
    """As a user runs them (own process, stderr a pipe as in a log): GPTQ's progress lines, then the
    report on stdout; no deprecation lines of torch, torchao or transformers on stderr."""
    import os
    import subprocess
    import sys

    exe = str(Path(sys.executable).with_name("llmpipe"))
    env = {**os.environ, "LLMPIPE_PROGRESS_EVERY": "0"}
    for argv, progress in (
        (["quantize", str(base_run), "--method", "gptq-int4", "--calib-seqs", "8"], "gptq: "),
        (["quantize", str(base_run), "--method", "int8"], None),
        (["prune", str(base_run), "--sparsity", "0.5"], None),
    ):
        out = tmp_path / argv[0] / argv[3]
        proc = subprocess.run([exe, *argv, "--eval-rows", "8", "--out", str(out)], capture_output=True,
                              text=True, timeout=600, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "bits/byte" in proc.stdout
        err = proc.stderr.splitlines()
        assert all(progress and x.startswith(progress) for x in err), proc.stderr
        assert bool(err) == bool(progress), proc.stderr


def _other_tokenizer(shards: Path, out: Path, *, vocab_size: int | None = None) -> Path:
    """``shards`` as if made with another tokenizer of the same vocabulary size ('a' and 'b' swap ids;
    the manifest's sha256 is the new file's), or with ``vocab_size`` ids in the manifest."""
    import hashlib

    shutil.copytree(shards, out)
    tok = json.loads((out / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    (out / "tokenizer.json").write_text(json.dumps(tok))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tokenizer"]["sha256"] = hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
    if vocab_size is not None:
        manifest["tokenizer"]["vocab_size"] = vocab_size
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_shards_of_another_tokenizer_and_no_eval_rows_are_refused(
    base_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval, quantize and prune score and calibrate on the shards' token ids with the model's tokenizer:
    shards made with another one (same vocabulary size, or a larger one) are refused in one line, and
    --eval-rows 0 before anything is written. The run's own shards still pass."""
    other = str(_other_tokenizer(byte_shards, tmp_path / "other"))
    larger = str(_other_tokenizer(byte_shards, tmp_path / "larger", vocab_size=300))
    run = str(base_run)
    another = "tokenised with another tokenizer than"
    cases = [
        (["eval", run, "--shards", other, "--device", "cpu"], another),
        (["quantize", run, "--method", "int8", "--eval", other], another),
        (["quantize", run, "--method", "gptq-int4", "--calib", other], another),
        (["quantize", run, "--method", "gptq-int4", "--calib", larger], "vocabulary of 300 ids, the model"),
        (["prune", run, "--method", "wanda", "--sparsity", "0.5", "--calib", other], another),
        (["prune", run, "--method", "wanda", "--sparsity", "0.5", "--calib", larger], "vocabulary of 300"),
        (["prune", run, "--sparsity", "0.5", "--finetune", "5", "--eval", other], another),
        (["quantize", run, "--method", "int8", "--eval-rows", "0"], "--eval-rows 0: must be 1 or more"),
        (["prune", run, "--sparsity", "0.5", "--eval-rows", "0"], "--eval-rows 0: must be 1 or more"),
    ]
    for argv, want in cases:
        out = [] if argv[0] == "eval" else ["--out", str(tmp_path / "x")]
        assert llmpipe([*argv, *out]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and want in err, (argv, err)
        assert not (tmp_path / "x").exists()
    assert llmpipe(["eval", run, "--shards", str(byte_shards), "--device", "cpu"]) == 0
    # its HF export: the tokenizer transformers loads from it is compared the same way
    hf = tmp_path / "hf"
    assert llmpipe(["export", run, "--out", str(hf)]) == 0
    assert llmpipe(["eval", str(hf), "--shards", str(byte_shards), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert llmpipe(["eval", str(hf), "--shards", other, "--device", "cpu"]) == 2
    assert another in capsys.readouterr().err
