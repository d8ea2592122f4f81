"""The trainer on a CUDA GPU: what CPU runs cannot check (NCCL, torch.compile's GPU kernels, fused AdamW,
the pinned non-blocking copies, FlexAttention's compiled document mask, float8 matmuls, DCP checkpoints
written from GPU memory).

These run only where torch sees a CUDA device; CI has none, so there they are skipped and the CPU tests
cover the same code paths on gloo. `bench/gpu_check.sh` runs them on a GPU machine together with
`bench/bench_gpu.py` (docs/benchmarks.md, section GPU).

Tolerances: a bf16 run rounds every matmul input to 8 bits of mantissa, so its losses follow the fp32 run
to about 1e-2 relative over 10 steps of a tiny model; fp32 on the GPU (no TF32) follows the CPU to 1e-3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import ROOT, torchrun, train_losses

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu_check.sh)")

STEPS = 10
COMMON = (
    "--config", str(ROOT / "configs/train/tiny.yaml"), f"--train.steps={STEPS}", "--train.log_every=1",
    "--train.val_every=0", "--metrics.tensorboard=false", "--data.batch_size=8", "--optim.warmup_steps=2",
    "--model.dim=128", "--model.n_heads=4", "--model.n_layers=2",
)  # fmt: skip


def run(byte_shards: Path, out: Path, *extra: str) -> dict[int, float]:
    proc = torchrun(1, "--data", str(byte_shards), "--out", str(out), *COMMON, *extra, timeout=600)
    (out / "stdout.txt").write_text(proc.stdout)
    return train_losses(out)


def rel_diff(a: dict[int, float], b: dict[int, float]) -> float:
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1)), (sorted(a), sorted(b))
    return max(abs(a[s] - b[s]) / abs(b[s]) for s in a)


def report(name: str, value: float) -> None:
    """One line per figure for bench/gpu_check.sh's log (pytest -s shows it)."""
    print(json.dumps({"check": name, "max_rel_diff": value}))


def test_gpu_bf16_and_fp32_track_cpu_fp32_and_resume(byte_shards: Path, tmp_path: Path) -> None:
    cpu = run(byte_shards, tmp_path / "cpu", "--parallel.device=cpu", "--parallel.mixed_precision=fp32")
    gpu32 = run(
        byte_shards, tmp_path / "gpu32", "--parallel.device=cuda", "--parallel.mixed_precision=fp32",
        "--parallel.compile=false",
    )  # fmt: skip
    # bf16, compiled blocks, fused AdamW, NCCL, pinned copies, a DCP checkpoint at step 5
    gpu = run(byte_shards, tmp_path / "gpu", "--parallel.device=cuda", "--checkpoint.every=5")
    assert all(v == v for v in gpu.values()), gpu  # no NaN
    report("gpu fp32 vs cpu fp32", rel_diff(gpu32, cpu))
    report("gpu bf16+compile vs cpu fp32", rel_diff(gpu, cpu))
    assert rel_diff(gpu32, cpu) < 1e-3
    assert rel_diff(gpu, cpu) < 2e-2
    assert gpu[STEPS] < gpu[1] - 0.5  # it learns
    start = (tmp_path / "gpu" / "stdout.txt").read_text()[:1000]
    assert "(nccl)" in start, start  # the start-up summary names the device and backend

    # the run killed after step 7 and restarted resumes from the step-5 checkpoint
    cut = tmp_path / "cut"
    torchrun(
        1, "--data", str(byte_shards), "--out", str(cut), *COMMON, "--parallel.device=cuda",
        "--checkpoint.every=5", "--debug.stop_after_step=7", timeout=600,
    )  # fmt: skip
    proc = torchrun(
        1, "--data", str(byte_shards), "--out", str(cut), *COMMON, "--parallel.device=cuda",
        "--checkpoint.every=5", timeout=600,
    )  # fmt: skip
    assert "resumed from" in proc.stdout and "at step 5" in proc.stdout, proc.stdout[-2000:]
    resumed = train_losses(cut)
    report("gpu resume vs uninterrupted", rel_diff(resumed, gpu))
    assert rel_diff(resumed, gpu) < 1e-3


def test_flex_document_mask_and_float8_on_gpu(byte_shards: Path, tmp_path: Path) -> None:
    sdpa = run(byte_shards, tmp_path / "sdpa", "--parallel.device=cuda", "--model.attention=sdpa")
    flex = run(byte_shards, tmp_path / "flex", "--parallel.device=cuda", "--model.attention=flex")
    report("flex vs dense document mask (bf16, compiled)", rel_diff(flex, sdpa))
    assert rel_diff(flex, sdpa) < 2e-2
    if torch.cuda.get_device_capability() >= (8, 9):
        f8 = run(byte_shards, tmp_path / "f8", "--parallel.device=cuda", "--parallel.float8=true")
        report("float8 vs bf16", rel_diff(f8, sdpa))
        assert rel_diff(f8, sdpa) < 5e-2
        assert f8[STEPS] < f8[1] - 0.5


def test_fused_loss_on_gpu_tracks_the_unfused_loss(byte_shards: Path, tmp_path: Path) -> None:
    """model.fused_loss on CUDA (bf16 chunks, compiled blocks, fused AdamW): the unfused run's losses
    within bf16 tolerance, and it learns."""
    plain = run(byte_shards, tmp_path / "plain", "--parallel.device=cuda")
    fused = run(byte_shards, tmp_path / "fused", "--parallel.device=cuda", "--model.fused_loss=true")
    report("fused vs unfused loss (bf16, compiled)", rel_diff(fused, plain))
    assert rel_diff(fused, plain) < 2e-2
    assert fused[STEPS] < fused[1] - 0.5
