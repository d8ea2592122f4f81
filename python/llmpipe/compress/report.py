"""The compression report: size on disk, bits per byte before and after, CPU tokens/s and latency.

Written next to every output as ``compression_report.json`` plus a short text summary
(``compression_report.txt``). After pruning with fine-tuning it shows every stage's bits per byte
(original, pruned before fine-tuning, fine-tuned) and says plainly when fine-tuning made it worse.
Speed is a forward pass over one sequence of the model's context on the one CPU thread (median of a
few runs after a warm-up): latency is its wall time, tokens/s the sequence length over it.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from llmpipe.compress.bpb import bits_per_byte

REPORT_JSON = "compression_report.json"
REPORT_TXT = "compression_report.txt"


def fp32_file_bytes(model: nn.Module) -> int:
    """Size of the model's fp32 weights as one safetensors file (the baseline of every size ratio)."""
    import tempfile

    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "fp32.safetensors"
        state = {k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()}
        save_file(state, str(f))
        return f.stat().st_size


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@torch.inference_mode()
def cpu_speed(model: nn.Module, seq_len: int, vocab: int, *, reps: int = 3) -> dict[str, float]:
    ids = torch.randint(0, vocab, (1, seq_len), generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: comparable figures on a shared, busy machine
    try:
        model(ids)  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            model(ids)
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    lat = statistics.median(times)
    return {"latency_ms": lat * 1e3, "tokens_per_s": seq_len / lat, "seq_len": seq_len}


def measure(
    model: nn.Module, shards: Path | None, *, seq_len: int, vocab: int, eval_rows: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"bpb": None}
    if shards is not None:
        out["bpb"] = bits_per_byte(model, shards, max_rows=eval_rows)
    out.update(cpu_speed(model, seq_len, vocab))
    return out


def build_report(
    *,
    method: str,
    source: Path,
    out: Path,
    weights_file: Path,
    baseline_weights_bytes: int,
    before: dict[str, Any],
    after: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    size = weights_file.stat().st_size
    rep: dict[str, Any] = {
        "method": method,
        "source": str(source),
        "output": str(out),
        "size_bytes": {"fp32_weights": baseline_weights_bytes, "weights": size, "output_dir": dir_size(out)},
        "size_ratio": size / baseline_weights_bytes,
        "before": before,
        "after": after,
        **(extra or {}),
    }
    if before.get("bpb") and after.get("bpb"):
        rep["bpb_change"] = after["bpb"] / before["bpb"] - 1
    pruned = rep.get("bpb_pruned_before_finetune")
    if before.get("bpb") is not None and pruned is not None and after.get("bpb") is not None:
        # every stage of prune + fine-tune: original -> pruned -> fine-tuned
        rep["bpb_stages"] = {"original": before["bpb"], "pruned": pruned, "finetuned": after["bpb"]}
        rep["finetune_bpb_change"] = after["bpb"] / pruned - 1
        rep["finetune_made_worse"] = after["bpb"] > pruned
    return rep


def _bpb_lines(rep: dict[str, Any]) -> list[str]:
    b, a = rep["before"], rep["after"]
    if a.get("bpb") is None or b.get("bpb") is None:
        return []
    stages = rep.get("bpb_stages")
    if stages is None:
        return [f"  bits/byte {b['bpb']:.4f} -> {a['bpb']:.4f} ({rep['bpb_change']:+.2%})"]
    orig, pruned, tuned = stages["original"], stages["pruned"], stages["finetuned"]
    steps, kept = rep.get("finetune_steps", "?"), rep.get("finetune_kept_step")
    at = f" (kept step {kept}: the best validation)" if kept not in (None, -1, steps) else ""
    lines = [
        f"  bits/byte: original {orig:.4f}",
        f"             pruned (before fine-tuning) {pruned:.4f} ({pruned / orig - 1:+.2%} vs original)",
        f"             fine-tuned {steps} steps{at} {tuned:.4f} "
        f"({rep['bpb_change']:+.2%} vs original, {rep['finetune_bpb_change']:+.2%} vs pruned)",
    ]
    if kept == 0:
        lines.append(
            f"  NOTE: fine-tuning never validated better than the pruned model in {steps} steps: the pruned "
            "model is kept (the data is too small or the learning rate too high to repair it)"
        )
    elif rep["finetune_made_worse"]:
        lines.append(
            f"  WARNING: fine-tuning made the model worse ({pruned:.4f} -> {tuned:.4f} bits/byte): "
            "too many steps or too high a learning rate for this data (fewer --finetune steps, a lower "
            "--lr, or more --data)"
        )
    return lines


def summary(rep: dict[str, Any]) -> str:
    b, a, s = rep["before"], rep["after"], rep["size_bytes"]
    lines = [
        f"{rep['method']}: {rep['source']} -> {rep['output']}",
        f"  weights on disk {s['weights'] / 1e6:.3f} MB vs fp32 {s['fp32_weights'] / 1e6:.3f} MB "
        f"({rep['size_ratio']:.3f}x)",
    ]
    lines.extend(_bpb_lines(rep))
    lines.append(
        f"  CPU forward of {a['seq_len']} tokens: {b['tokens_per_s']:.0f} -> {a['tokens_per_s']:.0f} tokens/s, "
        f"latency {b['latency_ms']:.2f} -> {a['latency_ms']:.2f} ms"
    )
    for k in ("format", "sparsity", "hidden", "finetune_steps"):
        if k in rep:
            lines.append(f"  {k}: {rep[k]}")
    return "\n".join(lines)


def write_report(out: Path, rep: dict[str, Any]) -> str:
    (out / REPORT_JSON).write_text(json.dumps(rep, indent=2) + "\n")
    text = summary(rep)
    (out / REPORT_TXT).write_text(text + "\n")
    return text
