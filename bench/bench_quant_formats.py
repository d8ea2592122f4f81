"""What each serving format costs: size on disk and bits per byte of `llmpipe quantize` outputs, the
bits per byte measured twice: by llmpipe's model (the report) and by the format's loader (transformers
with compressed-tensors, transformers' GGUF loader) on the same validation rows.

    python bench/bench_quant_formats.py RUN_DIR [--eval-rows 64] [--json OUT.json]

RUN_DIR is a trainer run (e.g. `make demo`'s out/demo/run) whose shards give the validation split.
Prints one row per output: format, method, weights bytes, ratio to fp32, bits/byte before -> after
(llmpipe) and after (loader). The figures in docs/serving.md come from this script.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

OUTPUTS = [
    ("compressed-tensors", "int8", []),
    ("compressed-tensors", "int4", ["--group-size", "32"]),
    ("compressed-tensors", "gptq-int4", ["--group-size", "32"]),
    ("gguf", "f16", []),
    ("gguf", "q8_0", []),
    ("gguf", "q4_0", []),
    ("llmpipe", "int8", []),
    ("llmpipe", "int4", ["--group-size", "32"]),
]


class Logits(nn.Module):
    def __init__(self, hf: nn.Module) -> None:
        super().__init__()
        self.hf = hf

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.hf(ids).logits


def loader_bpb(fmt: str, out: Path, shards: Path, rows: int) -> float | None:
    from llmpipe.compress.bpb import bits_per_byte
    from transformers import AutoModelForCausalLM

    if fmt == "compressed-tensors":
        hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    elif fmt == "gguf":
        hf = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32)
    else:
        return None
    return bits_per_byte(Logits(hf.eval()), shards, max_rows=rows)


def main(argv: list[str] | None = None) -> int:
    from llmpipe.cli import main as llmpipe
    from llmpipe.compress.model_io import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--eval-rows", type=int, default=64)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    shards = load_model(args.run).shards
    if shards is None:
        print("error: the run has no shards to evaluate on", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for fmt, method, extra in OUTPUTS:
            out = Path(d) / f"{fmt}-{method}"
            argv_q = ["quantize", str(args.run), "--method", method, "--format", fmt, "--out", str(out),
                      "--eval-rows", str(args.eval_rows), *extra]  # fmt: skip
            if llmpipe(argv_q) != 0:
                return 1
            rep = json.loads((out / "compression_report.json").read_text())
            rows.append({
                "format": fmt, "method": rep["method"], "group_size": rep["group_size"],
                "weights_bytes": rep["size_bytes"]["weights"], "ratio": rep["size_ratio"],
                "bpb_before": rep["before"]["bpb"], "bpb_after": rep["after"]["bpb"],
                "bpb_loader": loader_bpb(fmt, out, shards, args.eval_rows),
            })  # fmt: skip
    print(
        f"\n{'format':<19} {'method':<10} {'bytes':>9} {'x fp32':>7} {'bpb fp32':>9} {'bpb after':>10} {'loader':>8}"
    )
    for r in rows:
        loader = "-" if r["bpb_loader"] is None else f"{r['bpb_loader']:.4f}"
        print(f"{r['format']:<19} {r['method']:<10} {r['weights_bytes']:>9} {r['ratio']:>7.3f} "
              f"{r['bpb_before']:>9.4f} {r['bpb_after']:>10.4f} {loader:>8}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
