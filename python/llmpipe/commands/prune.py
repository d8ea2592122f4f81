"""``llmpipe prune MODEL --method magnitude|wanda --structure ... --out DIR [--finetune STEPS]``."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmpipe.compress.names import PRUNE_METHODS, STRUCTURES


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "prune",
        help="prune a trained model (magnitude/wanda; unstructured, 2:4, MLP neurons), optionally fine-tune",
        description=(
            "Zero the lowest-scoring weights of the block Linears (unstructured or 2:4) or remove whole MLP "
            "channels (neurons: a smaller dense model), write an HF Llama checkpoint (with masks.safetensors "
            "for masked pruning) and compression_report.json/.txt. --finetune STEPS continues training with "
            "the trainer (init.from_hf) while the masks hold, validating every tenth of the run, and exports the "
            "checkpoint that validates best to DIR (the pruned model itself when none beats it)."
        ),
    )
    p.add_argument("model", type=Path, metavar="MODEL", help="run directory or HF checkpoint directory")
    p.add_argument("--method", choices=PRUNE_METHODS, default="magnitude")
    p.add_argument("--structure", choices=STRUCTURES, default="unstructured")
    p.add_argument("--sparsity", type=float, default=None, help="share removed, in (0, 1) (2:4: 0.5)")
    p.add_argument(
        "--calib", type=Path, default=None, help="shards for Wanda's activations (default: the run's)"
    )
    p.add_argument("--calib-seqs", type=int, default=32)
    p.add_argument("--eval", type=Path, default=None, help="shards whose val split gives bits/byte")
    p.add_argument("--eval-rows", type=int, default=64)
    p.add_argument(
        "--finetune", type=int, default=0, metavar="STEPS", help="fine-tuning steps with masks held"
    )
    p.add_argument(
        "--data", type=Path, default=None, help="fine-tuning shards (default: --calib or the run's)"
    )
    p.add_argument("--train-config", type=Path, default=None, help="trainer YAML for fine-tuning")
    p.add_argument("--nproc", type=int, default=1, help="fine-tuning processes (torchrun)")
    p.add_argument(
        "--lr",
        type=float,
        default=1e-4,
        help="fine-tuning peak learning rate (default 1e-4: a repair, not a second pretraining)",
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out even when it holds files llmpipe did not write (they are deleted)",
    )
    p.set_defaults(func=run)


def _model_overrides(hf_config: dict[str, Any]) -> list[str]:
    from llmpipe.train.hf import overrides

    return overrides(hf_config)


EVALS = 10  # validations during a fine-tune (and a checkpoint at each, to keep the best)


def finetune_overrides(steps: int, args: argparse.Namespace) -> list[str]:
    """Validate and checkpoint every tenth of the run (all checkpoints kept: the best one is the result)."""
    every = max(1, steps // EVALS)
    return [
        f"--train.steps={steps}", f"--optim.lr={args.lr}", f"--optim.warmup_steps={max(1, steps // 10)}",
        "--checkpoint.resume=true", f"--train.val_every={every}", f"--checkpoint.every={every}",
        f"--checkpoint.keep={steps // every + 1}", f"--train.log_every={max(1, steps // 20)}",
        "--guard.enabled=false",
    ]  # fmt: skip


def best_step(run_dir: Path) -> tuple[int, dict[int, float]]:
    """The step whose validation loss is lowest (0: the pruned model itself), and every step's loss."""
    val: dict[int, float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "val_loss" in rec:
            val[int(rec["step"])] = float(rec["val_loss"])
    if not val:
        return -1, val
    return min(val, key=lambda k: (val[k], k)), val


STEP_LINE = re.compile(r"^step\s+(\d+) \|")


def finetune_dir(out: Path) -> Path:
    """Where ``--finetune`` trains: OUT-finetune, beside OUT."""
    return out.with_name(f"{out.name}-finetune")


def check_finetune_dir(run_dir: Path, inputs: dict[str, Path | None]) -> None:
    """Refuse (one line, before any work) a fine-tuning run directory that is or holds an input, or
    holds files llmpipe did not write (``--overwrite`` names OUT only: it never gives these up)."""
    from llmpipe.errors import LlmpipeError
    from llmpipe.outdir import apart_from_inputs, file_in_the_way
    from llmpipe.train.rundir import RUN_DIR

    what = "--finetune's run directory"
    apart_from_inputs(run_dir, inputs, what)
    if run_dir.is_symlink() or file_in_the_way(run_dir) is not None:
        problem = "is a link or a file, not a directory llmpipe made"
    elif found := RUN_DIR.foreign(run_dir):
        problem = f"holds files llmpipe did not write ({', '.join(found[:5])})"
    else:
        return
    raise LlmpipeError(
        f"{what} {run_dir} (beside --out) {problem}: move it, or choose another --out "
        "(--overwrite does not apply to it)"
    )


def finetune(out: Path, data: Path, steps: int, args: argparse.Namespace) -> Path:
    """Train ``steps`` steps from the pruned checkpoint in OUT (masks held) into OUT-finetune, showing the
    trainer's steps as they come (a bar on a terminal, its step lines in a log). A run an earlier prune
    left there is replaced, never resumed: it trained another pruned model, with other masks."""
    import shutil

    from llmpipe.errors import LlmpipeError

    run_dir = finetune_dir(out)
    if run_dir.exists():  # checked by check_finetune_dir: only an earlier run's files
        shutil.rmtree(run_dir)
    cfg = json.loads((out / "config.json").read_text())
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.nproc}", "--standalone", "-m", "llmpipe.train", "--data", str(data), "--out", str(run_dir),
        *(["--config", str(args.train_config)] if args.train_config else []),
        f"--init.from_hf={out}", *_model_overrides(cfg), *finetune_overrides(steps, args),
    ]  # fmt: skip
    err: deque[str] = deque(maxlen=200)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        drain = threading.Thread(target=err.extend, args=(proc.stderr,), daemon=True)
        drain.start()
        show_steps(proc.stdout, steps)
        code = proc.wait()
        drain.join()
    if code != 0:
        raise LlmpipeError(f"fine-tuning failed ({code}): {error_line(list(err))}")
    return run_dir


def show_steps(lines: Iterable[str], steps: int) -> None:
    """The trainer's output: its step lines as progress (a bar, or the lines themselves in a log)."""
    from llmpipe.progress import Progress

    bar = Progress(steps, "finetune", "steps")
    try:
        for line in lines:
            m = STEP_LINE.match(line)
            if m is None:
                continue
            step = int(m.group(1))
            if bar.bar is not None:
                bar.update(step - bar.done, line.split("|", 2)[1].strip() if "loss" in line else "")
            else:
                bar.done = step
                print(f"finetune: {line.strip()}", file=sys.stderr, flush=True)
    finally:
        bar.close()


def error_line(stderr: list[str]) -> str:
    """The line that says why: the trainer's ``error: ...``, else the last line of a Python error."""
    lines = [x.strip() for x in stderr if x.strip()]
    for x in reversed(lines):
        if x.startswith("error:"):
            return x.removeprefix("error:").strip()
    for x in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", x):
            return x
    return lines[-1] if lines else "(no output)"


def run(args: argparse.Namespace) -> int:
    from llmpipe.commands.quantize import check_counts
    from llmpipe.train.rundir import COMPRESSED_OUT

    # before anything loads: a user's directory is kept, and so is what the command reads
    inputs = {
        "the model": args.model,
        "--calib": args.calib,
        "--eval": args.eval,
        "--data": args.data,
        "--train-config": args.train_config,
    }
    COMPRESSED_OUT.check(args.out, args.overwrite, inputs=inputs)
    if args.finetune:
        check_finetune_dir(finetune_dir(args.out), inputs)
    check_counts(args)
    import torch

    from llmpipe.compress.calib import calibration_tokens
    from llmpipe.compress.model_io import check_shards, load_model, save_hf
    from llmpipe.compress.neurons import prune_neurons
    from llmpipe.compress.prune import check_sparsity, prune_weights, sparsity_of
    from llmpipe.compress.report import build_report, fp32_file_bytes, measure, write_report
    from llmpipe.errors import ConfigError
    from llmpipe.outdir import apart_from_inputs

    sparsity = check_sparsity(args.sparsity, args.structure)
    if args.finetune < 0:
        raise ConfigError("--finetune must be a non-negative number of steps")
    if args.finetune and args.structure == "neurons":
        raise ConfigError(
            "--finetune holds masks; a neuron-pruned model is dense: train it with init.from_hf"
        )
    loaded = load_model(args.model)
    apart_from_inputs(args.out, {"the run's shards": loaded.shards})
    if args.finetune:
        check_finetune_dir(finetune_dir(args.out), {"the run's shards": loaded.shards})
    model: Any = loaded.model
    cfg = model.cfg
    shards = args.eval or loaded.shards
    for d in dict.fromkeys((shards, args.calib)):  # measured on, calibrated on: the model's token ids
        check_shards(loaded, d, args.model)
    before = measure(
        model,
        shards,
        seq_len=int(cfg.max_seq_len or 0),
        vocab=int(cfg.vocab_size or 0),
        eval_rows=args.eval_rows,
    )
    fp32_bytes = fp32_file_bytes(model)
    calib = (
        calibration_tokens(args.calib or loaded.shards, args.calib_seqs) if args.method == "wanda" else None
    )
    t0 = time.perf_counter()
    extra: dict[str, Any] = {"structure": args.structure, "prune_method": args.method}
    masks: dict[str, torch.Tensor] = {}
    if args.structure == "neurons":
        model = prune_neurons(model, args.method, sparsity, calib)
        extra["hidden"] = {"before": cfg.hidden, "after": model.cfg.hidden}
    else:
        masks = prune_weights(model, args.method, sparsity, args.structure, calib)
        extra["sparsity"] = sparsity_of(model)
    extra["seconds"] = time.perf_counter() - t0
    save_hf(model, args.out, loaded, masks=masks, extra={"pruned_from": str(args.model), **extra})
    if args.finetune:
        data = args.data or args.calib or loaded.shards
        if data is None:
            raise ConfigError("--finetune needs shards: pass --data SHARDS")
        extra["bpb_pruned_before_finetune"] = measure(
            model,
            shards,
            seq_len=int(cfg.max_seq_len or 0),
            vocab=int(cfg.vocab_size or 0),
            eval_rows=args.eval_rows,
        )["bpb"]
        run_dir = finetune(args.out, data, args.finetune, args)
        step, val = best_step(run_dir)
        extra["finetune_steps"] = args.finetune
        extra["finetune_val_loss"] = val
        extra["finetune_kept_step"] = step
        if step != 0:  # a fine-tuned checkpoint validates better than the pruned model: it is the result
            from llmpipe.train.export_hf import load_run

            loaded.shards = loaded.shards or data
            model = load_run(run_dir, step=None if step < 0 else step)[1]
            save_hf(
                model,
                args.out,
                loaded,
                masks=masks,
                extra={"pruned_from": str(args.model), "finetuned_in": str(run_dir), **extra},
            )
        extra["sparsity"] = sparsity_of(model)
    after = measure(
        model,
        shards,
        seq_len=int(cfg.max_seq_len or 0),
        vocab=int(cfg.vocab_size or 0),
        eval_rows=args.eval_rows,
    )
    rep = build_report(
        method=f"prune-{args.method}-{args.structure}", source=args.model, out=args.out,
        weights_file=args.out / "model.safetensors", baseline_weights_bytes=fp32_bytes, before=before,
        after=after, extra=extra,
    )  # fmt: skip
    print(write_report(args.out, rep))
    return 0
