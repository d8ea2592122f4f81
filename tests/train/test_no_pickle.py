"""No code from data (issue 28, item 1): a run directory someone sent runs nothing when it is resumed,
exported, evaluated, quantized or pruned. Each file of a checkpoint that is a pickle (``train_state.pt``,
DCP's ``.metadata``, the non-tensor values inside the ``.distcp`` files) gets a payload that would create
a marker file; the real commands refuse it with one line, exit non-zero, and the marker never appears.
A genuine checkpoint, and one written by the previous format (plain values only), still loads."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from conftest import ROOT, torchrun
from llmpipe.train.checkpoint import file_checksum, write_checksums
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

TINY = str(ROOT / "configs/train/tiny.yaml")
QUIET = ["--metrics.tensorboard=false", "--train.val_every=0", "--train.log_every=1"]
LATEST = "checkpoints/step-00000004"


class Payload:
    """Unpickling this creates ``marker``: the code a stranger's file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def _copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


def _llmpipe(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("llmpipe")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)


def _refused(proc: subprocess.CompletedProcess[str], file: str, marker: Path) -> None:
    """Nothing ran; exit non-zero with one ``error:`` line naming the file, and no traceback of ours."""
    assert not marker.exists(), "the payload ran"
    assert proc.returncode != 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("error: ", "llmpipe: error: "))]
    assert len(errors) == 1 and "refused" in errors[0] and file in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr or "torch.distributed.run" in proc.args, proc.stderr[-3000:]
    for ours in ("python", "train"):  # torchrun prints its own summary for a worker that exits non-zero
        assert f'File "{ROOT / ours}' not in proc.stderr, proc.stderr[-3000:]


def _resume(run: Path, byte_shards: Path) -> subprocess.CompletedProcess[str]:
    return torchrun(
        1, "--data", str(byte_shards), "--config", TINY, "--out", str(run), "--train.steps=6",
        "--checkpoint.every=2", *QUIET, check=False, timeout=240,
    )  # fmt: skip


def _plant_metadata(ckpt: Path, marker: Path) -> None:
    """The genuine metadata with a payload beside it: DCP's own reader would run it and go on."""
    with open(ckpt / ".metadata", "rb") as f:
        meta = pickle.load(f)  # our own file, written a moment ago
    meta.planner_data["x"] = Payload(marker)
    with open(ckpt / ".metadata", "wb") as f:
        pickle.dump(meta, f)


def test_the_payload_is_live(tmp_path: Path) -> None:
    """The planted files would run code through a plain unpickler (so the tests below test something)."""
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


def test_train_state_pickle_is_refused_on_resume(
    genuine_run: Path, byte_shards: Path, tmp_path: Path
) -> None:
    run, marker = _copy(genuine_run, tmp_path), tmp_path / "marker"
    state = run / LATEST / "train_state.pt"
    saved = torch.load(state, weights_only=True)
    torch.save({**saved, "guard": Payload(marker)}, state)
    proc = _resume(run, byte_shards)
    _refused(proc, "train_state.pt", marker)
    assert "it names exec" in proc.stderr
    assert not (run / "checkpoints/step-00000006").exists()  # nothing trained from it


def test_metadata_pickle_is_refused_by_resume_export_and_eval(
    genuine_run: Path, byte_shards: Path, tmp_path: Path
) -> None:
    run, marker = _copy(genuine_run, tmp_path), tmp_path / "marker"
    _plant_metadata(run / LATEST, marker)
    _refused(_resume(run, byte_shards), ".metadata", marker)
    text = tmp_path / "doc.txt"
    text.write_text("To be, or not to be, that is the question.\n")
    for args in (
        ["export", str(run), "--out", str(tmp_path / "hf")],
        ["eval", str(run), "--text", str(text), "--device", "cpu"],
        ["quantize", str(run), "--out", str(tmp_path / "q")],
    ):
        proc = _llmpipe(*args)
        _refused(proc, ".metadata", marker)
        assert "names builtins.exec" in proc.stderr
    assert not (tmp_path / "hf").exists() and not (tmp_path / "q").exists()


def test_a_dotted_name_cannot_reach_past_the_allow_list(genuine_run: Path, tmp_path: Path) -> None:
    """``pathlib.Path`` is allowed in metadata; ``pathlib.Path.touch`` (a protocol-4 dotted name) is not."""
    run, marker = _copy(genuine_run, tmp_path), tmp_path / "marker"

    class Touch:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    with open(run / LATEST / ".metadata", "rb") as f:
        meta = pickle.load(f)
    meta.planner_data["x"] = Touch()
    with open(run / LATEST / ".metadata", "wb") as f:
        pickle.dump(meta, f, protocol=4)
    proc = _llmpipe("export", str(run), "--out", str(tmp_path / "hf"))
    _refused(proc, ".metadata", marker)


def test_a_data_file_outside_the_checkpoint_is_refused(genuine_run: Path, tmp_path: Path) -> None:
    run = _copy(genuine_run, tmp_path)
    with open(run / LATEST / ".metadata", "rb") as f:
        meta = pickle.load(f)
    for info in meta.storage_data.values():
        info.relative_path = "../step-00000002/__0_0.distcp"
    with open(run / LATEST / ".metadata", "wb") as f:
        pickle.dump(meta, f)
    proc = _llmpipe("export", str(run), "--out", str(tmp_path / "hf"))
    _refused(proc, ".metadata", tmp_path / "no-marker")
    assert "not a file of its own directory" in proc.stderr


def test_distcp_values_are_loaded_without_code(genuine_run: Path, byte_shards: Path, tmp_path: Path) -> None:
    """DCP unpickles a checkpoint's non-tensor values (optimizer hyperparameters) with weights_only=False;
    ours with weights_only=True. A checkpoint rewritten with a payload as the learning rate (resume) and
    as a model weight (export) is refused."""
    run, marker = _copy(genuine_run, tmp_path), tmp_path / "marker"
    ckpt = run / LATEST
    whole = tmp_path / "whole.pt"
    dcp_to_torch_save(ckpt, whole)
    state = torch.load(whole, weights_only=False)  # our own genuine file
    state["optim"]["param_groups"][0]["lr"] = Payload(marker)
    state["model"]["norm.weight"] = Payload(marker)
    for f in ckpt.glob("*.distcp"):
        f.unlink()
    dcp.save(state, checkpoint_id=str(ckpt), no_dist=True)
    # whoever rewrites the files rewrites their checksums too
    write_checksums(ckpt, {f.name: file_checksum(f) for f in ckpt.glob("*.distcp")})
    _refused(_resume(run, byte_shards), "step-00000004", marker)
    proc = _llmpipe("export", str(run), "--out", str(tmp_path / "hf"))
    _refused(proc, "step-00000004", marker)
    assert "model.norm.weight" in proc.stderr


def test_a_genuine_checkpoint_and_one_of_the_previous_format_resume(
    genuine_run: Path, byte_shards: Path, tmp_path: Path
) -> None:
    run = _copy(genuine_run, tmp_path)
    # the previous format: the same dict, pickled by torch.save with no conversion at save, and no
    # checksums (they came later)
    for ckpt in (run / "checkpoints").iterdir():
        state = ckpt / "train_state.pt"
        saved = torch.load(state, weights_only=True)
        del saved["checksums"]
        torch.save(saved, state)
        (ckpt / "checksums.json").unlink()
    proc = _resume(run, byte_shards)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stdout and "at step 4" in proc.stdout
    assert (run / "checkpoints/step-00000006").is_dir()
    proc = _llmpipe("export", str(run), "--out", str(tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_symlink_leading_outside_the_checkpoint_is_refused(
    genuine_run: Path, tmp_path: Path, capsys: Any
) -> None:
    """A checkpoint's files (and ``checkpoints`` or a step directory) that are symlinks to files elsewhere
    are not read: export and resume (``damage``, what ``Checkpointer.latest`` checks, and ``load_dcp``)
    stop with one line naming the link. A link that stays inside the checkpoint is read as before."""
    from llmpipe.cli import main
    from llmpipe.train.checkpoint import UnsafeCheckpointError, damage, load_dcp

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def planted(name: str) -> Path:
        run = tmp_path / f"run-{name.strip('._')}"
        shutil.copytree(genuine_run, run)
        ckpt = run / LATEST
        if name == "checkpoints":
            shutil.move(run / "checkpoints", elsewhere / "checkpoints")
            (run / "checkpoints").symlink_to(elsewhere / "checkpoints")
        else:  # the same bytes, but read through a link to a file outside the run
            shutil.move(ckpt / name, elsewhere / name)
            (ckpt / name).symlink_to(elsewhere / name)
        return run

    for name in ("__0_0.distcp", ".metadata", "train_state.pt", "checkpoints"):
        run = planted(name)
        ckpt = run / LATEST
        shown = LATEST if name == "checkpoints" else name
        with pytest.raises(UnsafeCheckpointError, match=f"{shown}: a symlink leading outside"):
            damage(ckpt)
        with pytest.raises(UnsafeCheckpointError, match=f"{shown}: a symlink leading outside"):
            load_dcp({}, ckpt, no_dist=True)
        capsys.readouterr()
        assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("llmpipe: error: ") and "\n" not in err and shown in err, err
        assert "a symlink leading outside" in err and not (tmp_path / "hf").exists()
    # a link inside the checkpoint directory is its own file: read as before
    run = tmp_path / "run-inside"
    shutil.copytree(genuine_run, run)
    ckpt = run / LATEST
    (ckpt / "__0_0.distcp").rename(ckpt / "data")
    (ckpt / "__0_0.distcp").symlink_to("data")
    assert damage(ckpt) is None
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
