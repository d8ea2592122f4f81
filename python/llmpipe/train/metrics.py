"""Training metrics: throughput, MFU, memory; written as JSONL and TensorBoard by rank 0.

MFU = achieved model FLOPs per second / peak FLOPs of the devices, with model FLOPs per token
(PaLM appendix B): 6 * N + 12 * n_layers * dim * seq_len, where N counts the parameters used in matmuls
(all but the embedding lookup; the output projection counts, tied or not) and the second term is attention scores and values.
docs/training.md holds the formula and the peak table.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

from llmpipe.train.model import ModelConfig

# dense bf16 peak TFLOPS per device (no sparsity), matched against torch.cuda.get_device_name()
PEAK_TFLOPS_BF16 = {
    "H200": 989.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,  # SXM
    "GH200": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
}


def peak_tflops(device: torch.device, configured: float) -> float | None:
    if configured > 0:
        return configured
    if device.type != "cuda":
        return None  # CPUs vary too much to tabulate: set metrics.peak_tflops to get MFU on CPU
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_TFLOPS_BF16.items():
        if key in name:
            return value
    return None


def flops_per_token(cfg: ModelConfig, n_params: int, seq_len: int) -> float:
    """Training FLOPs per token. N counts every matmul weight: all parameters but the embedding
    lookup (whose matrix still counts once when it is tied to the output projection)."""
    lookup = 0 if cfg.tie_embeddings else (cfg.vocab_size or 0) * cfg.dim
    return 6.0 * (n_params - lookup) + 12.0 * cfg.n_layers * cfg.dim * seq_len


def peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (2**20 if sys.platform == "darwin" else 2**10)


class Throughput:
    """Tokens per second (all ranks), MFU and tokens per CPU-second (this rank) between two ``tick``s."""

    def __init__(self, flops_token: float, world: int, peak: float | None) -> None:
        self.flops_token = flops_token
        self.world = world
        self.peak = peak
        self.t = time.perf_counter()
        self.cpu = time.process_time()
        self.tokens = 0

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def tick(self) -> dict[str, float | None]:
        now, cpu = time.perf_counter(), time.process_time()
        dt, dcpu, tokens = max(now - self.t, 1e-9), max(cpu - self.cpu, 1e-9), self.tokens
        self.t, self.cpu, self.tokens = now, cpu, 0
        tps = tokens / dt
        mfu = None if self.peak is None else tps * self.flops_token / (self.peak * 1e12 * self.world)
        return {
            "tokens": tokens,  # since the last record, all ranks: what tokens_per_s and MFU count
            "tokens_per_s": tps,
            "tokens_per_s_per_device": tps / self.world,
            "mfu": mfu,
            # this process's CPU time (all its threads): steadier than wall time on a shared machine
            "tokens_per_cpu_s": tokens / self.world / dcpu,
        }


class MetricsWriter:
    """Appends one JSON object per record to RUN_DIR/metrics.jsonl; mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: Path, *, enabled: bool, tensorboard: bool) -> None:
        self.enabled = enabled
        self._file = None
        self._tb: Any = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (closed in close)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def write(self, step: int, record: dict[str, Any]) -> None:
        if not self.enabled or self._file is None:
            return
        self._file.write(json.dumps({"step": step, **record}) + "\n")
        if self._tb is not None:
            for k, v in record.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
