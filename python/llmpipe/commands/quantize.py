"""``llmpipe quantize MODEL --method ... --out DIR``: post-training quantization with a compression report."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from llmpipe.compress.names import DEFAULT_GROUP, FORMATS, GGUF_METHODS, METHODS


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "quantize",
        help="quantize a trained model (int8, int4, gptq-int4, f16/q8_0/q4_0 GGUF, ...) and report "
        "size/quality/speed",
        description=(
            "Read a run directory of the trainer or an HF Llama checkpoint, quantize it and write it in a "
            "format others load: compressed-tensors (the default for int8, int4 and gptq-int4: the blocks' "
            "Linears quantized, embedding and output head fp16; AutoModelForCausalLM.from_pretrained and "
            "vLLM load it), gguf (model.gguf for llama.cpp with the tokenizer inside; --method f16, q8_0 "
            "or q4_0, int8/int4 meaning q8_0/q4_0) or llmpipe (every method, the embedding and head "
            "quantized too; llmpipe.compress.store.load_quantized reads it; the default for nf4 and "
            "int8-dynamic, which the other formats do not hold). Writes compression_report.json/.txt "
            "beside it: size on disk, bits per byte before and after on the shards' validation split, "
            "CPU tokens/s and latency. See docs/serving.md."
        ),
    )
    p.add_argument("model", type=Path, metavar="MODEL", help="run directory or HF checkpoint directory")
    p.add_argument(
        "--method", choices=(*METHODS, *GGUF_METHODS), default=None,
        help="default: the run's QAT scheme, else int8",
    )  # fmt: skip
    p.add_argument(
        "--format", choices=FORMATS, default=None,
        help="compressed-tensors (default), gguf, or llmpipe (the default for nf4, int8-dynamic)",
    )  # fmt: skip
    p.add_argument(
        "--group-size", type=int, default=None,
        help=f"4-bit methods: weights per scale (default {DEFAULT_GROUP}; GGUF blocks are 32)",
    )  # fmt: skip
    p.add_argument(
        "--calib", type=Path, default=None, help="shards for GPTQ calibration (default: the run's)"
    )
    p.add_argument("--calib-seqs", type=int, default=32, help="calibration sequences (default 32)")
    p.add_argument("--eval", type=Path, default=None, help="shards whose val split gives bits/byte")
    p.add_argument("--eval-rows", type=int, default=64, help="validation rows for bits/byte (default 64)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out even when it holds files llmpipe did not write (they are deleted)",
    )
    p.set_defaults(func=run)


def check_counts(args: argparse.Namespace) -> None:
    """--eval-rows and --calib-seqs count rows: at least one (before anything loads or is written)."""
    from llmpipe.errors import ConfigError

    for option, n in (("--eval-rows", args.eval_rows), ("--calib-seqs", args.calib_seqs)):
        if n < 1:
            raise ConfigError(f"{option} {n}: must be 1 or more rows")


def _format(method: str | None, fmt: str | None) -> str:
    from llmpipe.errors import ConfigError

    if method in GGUF_METHODS:
        if fmt not in (None, "gguf"):
            raise ConfigError(f"--method {method} is a GGUF type: use --format gguf")
        return "gguf"
    if fmt is not None:
        return str(fmt)
    return "llmpipe" if method in ("nf4", "int8-dynamic") else "compressed-tensors"


def run(args: argparse.Namespace) -> int:
    from llmpipe.train.rundir import COMPRESSED_OUT

    # before anything loads: a user's directory is kept, and so is what the command reads
    inputs = {"the model": args.model, "--calib": args.calib, "--eval": args.eval}
    COMPRESSED_OUT.check(args.out, args.overwrite, inputs=inputs)
    check_counts(args)
    if args.group_size is not None and args.group_size <= 0:
        from llmpipe.errors import ConfigError

        raise ConfigError(f"--group-size must be a positive number of weights, got {args.group_size}")
    from llmpipe.compress.calib import calibration_tokens
    from llmpipe.compress.model_io import check_shards, hf_config_of, load_model
    from llmpipe.compress.report import build_report, fp32_file_bytes, measure, write_report
    from llmpipe.compress.spec import QuantSpec, check
    from llmpipe.errors import ConfigError
    from llmpipe.outdir import apart_from_inputs

    loaded = load_model(args.model)
    apart_from_inputs(args.out, {"the run's shards": loaded.shards})
    method = args.method
    if loaded.qat is not None:  # QAT trained against one scheme: converting means quantizing with it
        want = "int4" if loaded.qat["scheme"] == "int4" else "int8"
        method = method or want
        same = {"int4": ("int4", "gptq-int4", "q4_0"), "int8": ("int8", "q8_0")}[want]
        if method not in same:
            raise ConfigError(
                f"{args.model} was trained with qat.scheme={loaded.qat['scheme']}; use --method {want}"
            )
        group = args.group_size or (32 if method == "q4_0" else loaded.qat["group_size"])
        if want == "int4" and group != loaded.qat["group_size"]:
            raise ConfigError(
                f"{args.model} was trained with qat.group_size={loaded.qat['group_size']}; "
                f"pass --group-size {loaded.qat['group_size']}"
                + (" (GGUF q4_0 blocks are 32: this run has no GGUF q4_0 form)" if method == "q4_0" else "")
            )
    fmt = _format(method, args.format)
    if fmt == "gguf":
        from llmpipe.compress.to_gguf import ALIASES

        method = ALIASES.get(method or "int8", method or "int8")
        if method not in GGUF_METHODS:
            raise ConfigError(
                f"--format gguf takes --method {', '.join(GGUF_METHODS)} (or int8, int4), not {method}"
            )
        if args.group_size not in (None, 32):
            raise ConfigError("--format gguf: GGUF blocks are 32 weights; drop --group-size")
    spec = QuantSpec("int8" if fmt == "gguf" else (method or "int8"), args.group_size or DEFAULT_GROUP)
    model: Any = loaded.model
    check(spec, model)
    if fmt == "compressed-tensors":
        from llmpipe.compress.to_ct import quantization_config

        quantization_config(spec)  # refuses a method the format does not hold, before any work
    elif fmt == "gguf":
        from llmpipe.compress.to_gguf import check_model

        check_model(model, method)
        if loaded.tokenizer is None:
            raise ConfigError("--format gguf holds the tokenizer: this model has none (no tokenizer.json)")
    shards = args.eval or loaded.shards
    for d in dict.fromkeys((shards, args.calib)):  # measured on, calibrated on: the model's token ids
        check_shards(loaded, d, args.model)
    cfg = model.cfg
    seq_len = cfg.max_seq_len
    before = measure(
        model, shards, seq_len=int(seq_len or 0), vocab=int(cfg.vocab_size or 0), eval_rows=args.eval_rows
    )
    fp32_bytes = fp32_file_bytes(model)
    calib = (
        calibration_tokens(args.calib or loaded.shards, args.calib_seqs)
        if spec.method == "gptq-int4" and fmt != "gguf"
        else None
    )
    t0 = time.perf_counter()
    if fmt == "gguf":
        from llmpipe.compress.to_gguf import quantize_gguf, save_gguf

        raw = quantize_gguf(model, method)
        took = time.perf_counter() - t0
        weights = save_gguf(model, raw, method, args.out, loaded.tokenizer, loaded.eos_id)
    else:
        from llmpipe.compress.quantize import quantize_model

        ct = fmt == "compressed-tensors"
        quantize_model(model, spec, calib, progress=True, blocks_only=ct)
        took = time.perf_counter() - t0
        if ct:
            from llmpipe.compress.to_ct import save_compressed_tensors

            weights = save_compressed_tensors(
                model, spec, args.out, hf_config_of(model, loaded), loaded.tokenizer, loaded.eos_id
            )
        else:
            from llmpipe.compress.store import save_quantized

            weights = save_quantized(model, spec, args.out, hf_config_of(model, loaded), loaded.tokenizer)
    after = measure(
        model, shards, seq_len=int(seq_len or 0), vocab=int(cfg.vocab_size or 0), eval_rows=args.eval_rows
    )
    group = spec.group_size if spec.grouped else None
    if fmt == "gguf":
        group = None if method == "f16" else 32
    rep = build_report(
        method=method if fmt == "gguf" else spec.method, source=args.model, out=args.out,
        weights_file=weights, baseline_weights_bytes=fp32_bytes, before=before, after=after,
        extra={"format": fmt, "group_size": group, "seconds": took, "calibration_seqs": 0 if calib is None else len(calib)},
    )  # fmt: skip
    print(write_report(args.out, rep))
    return 0
