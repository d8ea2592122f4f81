"""Checkpoints you can trust, and one line instead of a traceback (issue 28, items 11-15).

Each checkpoint records the CRC-32 of every 1 MiB block of its files (``checksums.json``): a ``.distcp``
byte changed without changing the file's size is found by resume (falls back to the previous checkpoint),
export and eval (one ``error:`` line, exit 2); when no earlier checkpoint is intact the run stops with one
line that says so. A manifest whose vocab_size is below its token ids, a malformed tokenizer.json in the
shards, a JSONL line nested 100k deep and a pickled ``pytorch_model.bin`` each give one ``error:`` line.
Real torchrun processes (one rank: nothing here depends on the number of ranks) and the real commands,
on the session's four-step run (``genuine_run``)."""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, torchrun
from llmpipe.cli import main
from llmpipe.train.checkpoint import damage

TINY = str(ROOT / "configs/train/tiny.yaml")
QUIET = ["--metrics.tensorboard=false", "--train.val_every=0", "--train.log_every=1"]
LATEST = "checkpoints/step-00000004"


def _copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


def _flip(path: Path, at: int) -> None:
    """Four bytes inverted in place: the file keeps its size."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(4)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in old))
    assert path.stat().st_size == size


def _llmpipe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``llmpipe ARGS`` in this process (a traceback would fail the test): exit code and stderr."""
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().err


def _one_error(rc: int, err: str, *texts: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("llmpipe: error: "), (rc, err)
    for text in texts:
        assert text in lines[0], err
    return lines[0]


def _trainer_error(proc: Any, *texts: str) -> str:
    """One ``error:`` line from the worker, which exits 2 (torchrun itself exits 1 and names the code)."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0 and "exitcode  : 2" in proc.stderr, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(errors) == 1, proc.stderr[-3000:]
    for ours in ("python", "train"):  # torchrun prints its own summary for a worker that exits non-zero
        assert f'File "{ROOT / ours}' not in proc.stderr, proc.stderr[-3000:]
    for text in texts:
        assert text in errors[0], errors[0]
    return errors[0]


def _resume(run: Path, data: Path, steps: int = 6) -> Any:
    return torchrun(
        1, "--data", str(data), "--config", TINY, "--out", str(run), f"--train.steps={steps}",
        "--checkpoint.every=2", "--checkpoint.keep=3", *QUIET, check=False, timeout=240,
    )  # fmt: skip


def test_item11_corrupted_distcp_same_size_is_detected(
    genuine_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(genuine_run, tmp_path)
    ckpt = run / LATEST
    distcp = ckpt / "__0_0.distcp"
    _flip(distcp, distcp.stat().st_size // 2)  # inside a weight: DCP reads it back without a word

    # export and eval of the damaged checkpoint: one line each, nothing written
    rc, err = _llmpipe(capsys, "export", str(run), "--out", str(tmp_path / "hf"))
    _one_error(rc, err, "step-00000004 is damaged", "__0_0.distcp: bytes ", "differ from their checksums")
    assert not (tmp_path / "hf").exists()
    doc = tmp_path / "doc.txt"
    doc.write_text("To be, or not to be, that is the question.\n")
    rc, err = _llmpipe(capsys, "eval", str(run), "--text", str(doc), "--device", "cpu")
    _one_error(rc, err, "step-00000004 is damaged")
    assert json.loads((ckpt / "checksums.json").read_text())["files"].keys() >= {
        ".metadata", "train_state.pt", "__0_0.distcp",
    }  # fmt: skip
    assert not list(ckpt.glob("__*_checksums.json"))  # the per-rank parts were merged
    # the export of an earlier, intact checkpoint still works
    rc, err = _llmpipe(capsys, "export", str(run), "--step", "2", "--out", str(tmp_path / "hf2"))
    assert rc == 0, err

    # the checksum list itself damaged, or gone from a checkpoint whose train state asks for one
    other = _copy(genuine_run, tmp_path / "b")
    sums = other / LATEST / "checksums.json"
    sums.write_text(sums.read_text()[:-20])
    assert damage(other / LATEST) == "checksums.json cannot be read (JSONDecodeError)"
    sums.unlink()
    assert damage(other / LATEST) == "checksums.json is missing"
    # a checkpoint from before checksums (none, and its train state asks for none) loads unchecked
    state = other / LATEST / "train_state.pt"
    saved = torch.load(state, weights_only=True)
    del saved["checksums"]
    torch.save(saved, state)
    assert damage(other / LATEST) is None

    # resume: the damaged checkpoint is moved aside with one line, the run goes on from step 2
    proc = _resume(run, byte_shards)
    assert proc.returncode == 0, proc.stderr[-3000:]
    damaged = [line for line in proc.stdout.splitlines() if "is damaged" in line]
    assert len(damaged) == 1, proc.stdout[-3000:]
    assert "step-00000004 is damaged (__0_0.distcp: bytes " in damaged[0]
    assert damaged[0].endswith("moved to damaged-step-00000004, falling back to step-00000002")
    assert "at step 2" in proc.stdout
    assert (run / "checkpoints/damaged-step-00000004").is_dir() and (
        run / "checkpoints/step-00000006"
    ).is_dir()


def test_a_second_damaged_copy_of_a_step_is_kept_beside_the_first(
    genuine_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that trained past step 4 again after its step 4 was moved aside, and finds the new step 4
    damaged too, keeps both copies for inspection (the second as damaged-step-00000004-2)."""
    from llmpipe.train.checkpoint import Checkpointer
    from llmpipe.train.config import CheckpointConfig

    run = _copy(genuine_run, tmp_path)
    first = run / "checkpoints/damaged-step-00000004"
    first.mkdir()
    (first / "__0_0.distcp").write_bytes(b"the first damaged copy")
    distcp = run / LATEST / "__0_0.distcp"
    cut = distcp.stat().st_size // 2
    with open(distcp, "r+b") as f:
        f.truncate(cut)
    latest = Checkpointer(run, CheckpointConfig(), rank=0, world_size=1).latest()
    assert latest == run / "checkpoints/step-00000002"
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith("moved to damaged-step-00000004-2, falling back to step-00000002")
    )
    assert (first / "__0_0.distcp").read_bytes() == b"the first damaged copy"
    assert (run / "checkpoints/damaged-step-00000004-2/__0_0.distcp").stat().st_size == cut
    assert not (run / LATEST).exists()


def test_item15_damaged_first_checkpoint_stops_with_the_right_message(
    genuine_run: Path, byte_shards: Path, tmp_path: Path
) -> None:
    """The only checkpoint is truncated: no "falling back to the previous checkpoint" (there is none),
    and no silent start from step 0 either: one line, exit 2."""
    run = _copy(genuine_run, tmp_path)
    shutil.rmtree(run / "checkpoints/step-00000002")
    distcp = run / LATEST / "__0_0.distcp"
    with open(distcp, "r+b") as f:
        f.truncate(distcp.stat().st_size // 2)
    proc = _resume(run, byte_shards)
    line = _trainer_error(
        proc, "step-00000004 is damaged (__0_0.distcp is cut short", "moved to damaged-step-00000004"
    )
    assert "no earlier checkpoint to fall back to" in line
    assert "falling back" not in proc.stdout + proc.stderr
    assert not (run / "checkpoints/step-00000006").exists()  # nothing trained


def test_item12_manifest_vocab_size_below_the_token_ids(byte_shards: Path, tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shutil.copytree(byte_shards, shards)
    manifest = json.loads((shards / "manifest.json").read_text())
    manifest["tokenizer"]["vocab_size"] = 100  # the shards hold byte ids up to 256
    manifest["tokenizer"]["eos_id"] = 0  # (an EOS id outside the vocabulary is refused as such, sooner)
    (shards / "manifest.json").write_text(json.dumps(manifest))
    proc = _resume(tmp_path / "run", shards, steps=2)
    line = _trainer_error(proc, f"{shards / 'manifest.json'}: the shards hold token id ", "vocab_size is 100")
    found = re.search(r"token id (\d+)", line)
    assert found and 100 <= int(found.group(1)) <= 256


def test_item13_malformed_tokenizer_is_refused_by_export(
    genuine_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shards made with a tokenizer.json that is JSON but not a tokenizer (the manifest's sha256 is its
    own): the export refuses it instead of writing a directory AutoTokenizer cannot load."""
    from transformers import PreTrainedTokenizerFast

    shards = tmp_path / "shards"
    shutil.copytree(byte_shards, shards)
    tok = json.loads((shards / "tokenizer.json").read_text())
    tok["model"]["type"] = "NoSuchModel"
    bad = shards / "tokenizer.json"
    bad.write_text(json.dumps(tok))
    with pytest.raises(Exception):  # noqa: B017, PT011 - the oracle: transformers cannot load it
        PreTrainedTokenizerFast(tokenizer_file=str(bad))
    manifest = json.loads((shards / "manifest.json").read_text())
    manifest["tokenizer"]["sha256"] = hashlib.sha256(bad.read_bytes()).hexdigest()
    (shards / "manifest.json").write_text(json.dumps(manifest))
    run = _copy(genuine_run, tmp_path)
    cfg = run / "config.yaml"
    cfg.write_text(cfg.read_text().replace(str(byte_shards), str(shards)))
    rc, err = _llmpipe(capsys, "export", str(run), "--out", str(tmp_path / "hf"))
    _one_error(rc, err, f"{bad}: not a tokenizer that transformers' AutoTokenizer can load")
    assert not (tmp_path / "hf").exists()


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def test_item14_eval_deep_jsonl_and_pickled_weights(
    genuine_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": "fine"}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    rc, err = _llmpipe(capsys, "eval", str(genuine_run), "--text", str(deep), "--device", "cpu")
    _one_error(rc, err, f"{deep}:2: JSON nested too deeply")

    hf = tmp_path / "hf"
    rc, err = _llmpipe(capsys, "export", str(genuine_run), "--out", str(hf))
    assert rc == 0, err
    (hf / "model.safetensors").unlink()
    marker = tmp_path / "marker"
    torch.save({"model.norm.weight": _Payload(marker)}, hf / "pytorch_model.bin")
    with pytest.raises(pickle.UnpicklingError):  # the file is live: only weights_only stops it
        torch.load(hf / "pytorch_model.bin", weights_only=True)
    doc = tmp_path / "doc.txt"
    doc.write_text("To be, or not to be, that is the question.\n")
    rc, err = _llmpipe(capsys, "eval", str(hf), "--text", str(doc), "--device", "cpu")
    _one_error(rc, err, "refused: pytorch_model.bin: it names ", "a pickle that could run code")
    assert not marker.exists()


def test_the_chosen_checkpoint_is_the_latest_or_the_one_asked_for(tmp_path: Path) -> None:
    from llmpipe.errors import LlmpipeError
    from llmpipe.train.checkpoint import chosen_checkpoint

    with pytest.raises(LlmpipeError, match="no checkpoint yet"):
        chosen_checkpoint(tmp_path)
    for step in (2, 10, 4):
        (tmp_path / "checkpoints" / f"step-{step:08d}").mkdir(parents=True)
    assert chosen_checkpoint(tmp_path).name == "step-00000010"
    assert chosen_checkpoint(tmp_path, 4).name == "step-00000004"
    with pytest.raises(LlmpipeError, match=r"no such checkpoint \(have \['step-00000002', 'step-00000004'"):
        chosen_checkpoint(tmp_path, 3)


def test_a_refused_resume_or_fresh_start_leaves_the_run_as_it_was(
    genuine_run: Path, byte_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resume into another model is refused before the run's config.yaml is rewritten (export and eval
    still fit the checkpoints), naming DCP's real reason; ``checkpoint.resume=false`` over a run's
    checkpoints is refused (its checkpoints would mix with the old run's, and keep-K pruning delete the
    new ones); an export whose config.yaml does not fit the checkpoint is one line with the reason."""
    run = _copy(genuine_run, tmp_path)
    saved = (run / "config.yaml").read_text()
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    proc = torchrun(
        1, "--data", str(byte_shards), "--config", TINY, "--out", str(run), "--train.steps=6",
        "--model.dim=128", *QUIET, check=False, timeout=240,
    )  # fmt: skip
    line = _trainer_error(proc, "does not fit this run's model (Size mismatch", "move or delete")
    assert "--checkpoint.resume=false" not in line and "CheckpointException" not in line
    assert (run / "config.yaml").read_text() == saved
    proc = torchrun(
        1, "--data", str(byte_shards), "--config", TINY, "--out", str(run), "--train.steps=3",
        "--checkpoint.every=2", "--model.dim=128", "--checkpoint.resume=false", *QUIET, check=False,
    )  # fmt: skip
    _trainer_error(proc, "already holds checkpoints", "and checkpoint.resume is false", "new --out")
    assert (run / "config.yaml").read_text() == saved
    assert (
        sorted(p.name for p in (run / "checkpoints").iterdir()) == steps == ["step-00000002", "step-00000004"]
    )
    rc, err = _llmpipe(capsys, "export", str(run), "--out", str(tmp_path / "hf"))
    assert rc == 0, err
    # a config.yaml that no longer fits its checkpoints: one line naming the reason, also for eval
    (run / "config.yaml").write_text(saved.replace("\n  dim: 64\n", "\n  dim: 128\n"))
    assert (run / "config.yaml").read_text() != saved
    rc, err = _llmpipe(capsys, "export", str(run), "--out", str(tmp_path / "hf2"))
    _one_error(rc, err, "does not fit the model", "config.yaml describes (Size mismatch")
    doc = tmp_path / "doc.txt"
    doc.write_text("To be, or not to be, that is the question.\n")
    rc, err = _llmpipe(capsys, "eval", str(run), "--text", str(doc), "--device", "cpu")
    _one_error(rc, err, "does not fit the model", "(Size mismatch")
