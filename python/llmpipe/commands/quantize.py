"""``llmpipe quantize MODEL --method ... --out DIR``: post-training quantization with a compression report."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from llmpipe.compress.names import DEFAULT_GROUP, METHODS


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "quantize",
        help="quantize a trained model (int8, int8-dynamic, int4, nf4, gptq-int4) and report size/quality/speed",
        description=(
            "Read a run directory of the trainer or an HF Llama checkpoint, quantize every Linear and "
            "the embedding, write a llmpipe quantized checkpoint (load it with "
            "llmpipe.compress.store.load_quantized) and compression_report.json/.txt: size on disk, bits "
            "per byte before and after on the shards' validation split, CPU tokens/s and latency."
        ),
    )
    p.add_argument("model", type=Path, metavar="MODEL", help="run directory or HF checkpoint directory")
    p.add_argument("--method", choices=METHODS, default=None, help="default: the run's QAT scheme, else int8")
    p.add_argument("--group-size", type=int, default=DEFAULT_GROUP, help="4-bit methods: weights per scale")
    p.add_argument(
        "--calib", type=Path, default=None, help="shards for GPTQ calibration (default: the run's)"
    )
    p.add_argument("--calib-seqs", type=int, default=32, help="calibration sequences (default 32)")
    p.add_argument("--eval", type=Path, default=None, help="shards whose val split gives bits/byte")
    p.add_argument("--eval-rows", type=int, default=64, help="validation rows for bits/byte (default 64)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmpipe.compress.calib import calibration_tokens
    from llmpipe.compress.model_io import load_model
    from llmpipe.compress.quantize import quantize_model
    from llmpipe.compress.report import build_report, fp32_file_bytes, measure, write_report
    from llmpipe.compress.spec import QuantSpec, check
    from llmpipe.compress.store import save_quantized
    from llmpipe.errors import ConfigError

    loaded = load_model(args.model)
    method = args.method
    if loaded.qat is not None:  # QAT trained against one scheme: converting means quantizing with it
        want = "int4" if loaded.qat["scheme"] == "int4" else "int8"
        method = method or want
        if method not in (want, "gptq-int4" if want == "int4" else want):
            raise ConfigError(
                f"{args.model} was trained with qat.scheme={loaded.qat['scheme']}; use --method {want}"
            )
        if want == "int4" and args.group_size != loaded.qat["group_size"]:
            raise ConfigError(
                f"{args.model} was trained with qat.group_size={loaded.qat['group_size']}; "
                f"pass --group-size {loaded.qat['group_size']}"
            )
    spec = QuantSpec(method or "int8", args.group_size)
    model: Any = loaded.model
    check(spec, model)
    if args.calib_seqs <= 0:
        raise ConfigError("--calib-seqs must be positive")
    shards = args.eval or loaded.shards
    cfg = model.cfg
    seq_len = cfg.max_seq_len
    before = measure(
        model, shards, seq_len=int(seq_len or 0), vocab=int(cfg.vocab_size or 0), eval_rows=args.eval_rows
    )
    fp32_bytes = fp32_file_bytes(model)
    calib = (
        calibration_tokens(args.calib or loaded.shards, args.calib_seqs)
        if spec.method == "gptq-int4"
        else None
    )
    t0 = time.perf_counter()
    quantize_model(model, spec, calib, progress=True)
    took = time.perf_counter() - t0
    from llmpipe.compress.model_io import hf_config_of

    weights = save_quantized(model, spec, args.out, hf_config_of(model, loaded), loaded.tokenizer)
    after = measure(
        model, shards, seq_len=int(seq_len or 0), vocab=int(cfg.vocab_size or 0), eval_rows=args.eval_rows
    )
    rep = build_report(
        method=spec.method, source=args.model, out=args.out, weights_file=weights,
        baseline_weights_bytes=fp32_bytes, before=before, after=after,
        extra={"group_size": spec.group_size if spec.grouped else None, "seconds": took,
               "calibration_seqs": 0 if calib is None else len(calib)},
    )  # fmt: skip
    print(write_report(args.out, rep))
    return 0
