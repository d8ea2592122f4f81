"""``llmpipe quality``: train the quality classifier, calibrate its threshold, check documents.

llmpipe quality train --positive ref/ --negative crawl/ --out model.bin
llmpipe quality train --labelled labels.jsonl --positive-label hq --out model.bin
llmpipe quality calibrate --model model.bin --target-retention 0.3 crawl/
llmpipe quality calibrate --model dclm.bin --format fasttext --label __label__hq --target-retention 0.1 crawl/
llmpipe quality check crawl/ [--config configs/curate/web.yaml]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmpipe.argtypes import int_at_least
from llmpipe.errors import ConfigError, InputError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "quality",
        help="train / calibrate the quality classifier, check documents",
        description="The model-based quality filter and a dry run of the heuristic filters: `train` fits "
        "the hashed n-gram classifier on good vs bad text (held-out AUC), `calibrate` picks the threshold "
        "that keeps a target share of an input's words, `check` runs the heuristic filters of a curate "
        "config on inputs and counts the drops by reason, without writing shards.",
    )
    qs = p.add_subparsers(title="quality commands", metavar="SUBCOMMAND", required=True)

    t = qs.add_parser("train", help="train a hashed n-gram classifier: positive (good) vs negative text")
    t.add_argument("--positive", nargs="+", default=[], metavar="FILE", help="good text (files, dirs)")
    t.add_argument("--negative", nargs="+", default=[], metavar="FILE", help="text to filter out")
    t.add_argument(
        "--labelled",
        nargs="+",
        default=[],
        metavar="JSONL",
        help="JSONL records with `text` and `label` (adds to --positive/--negative)",
    )
    t.add_argument(
        "--positive-label",
        default="1",
        metavar="VALUE",
        help="the --labelled label of good text (default 1; any other label is negative)",
    )
    t.add_argument(
        "--char-ngrams",
        default="3-5",
        metavar="MIN-MAX",
        help="character n-grams of each word as features (default 3-5; 0 turns them off)",
    )
    t.add_argument("--out", required=True, type=Path, metavar="MODEL", help="model file to write")
    t.add_argument("--bits", type=int, default=20, help="hash buckets = 2^bits (default 20)")
    t.add_argument("--epochs", type=int, default=5)
    t.add_argument("--lr", type=float, default=0.5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--chunk-lines",
        type=int,
        default=0,
        metavar="N",
        help="cut each input document into documents of N lines (books, long files)",
    )
    t.add_argument(
        "--holdout",
        type=float,
        default=0.1,
        help="fraction held out to report ROC AUC (default 0.1; 0 trains on all)",
    )
    t.set_defaults(func=run_train)

    c = qs.add_parser("calibrate", help="the threshold that keeps a target fraction of the input's words")
    c.add_argument("inputs", nargs="+", metavar="INPUT")
    c.add_argument("--model", required=True, type=Path)
    c.add_argument(
        "--format",
        choices=("llmpipe", "fasttext"),
        default="llmpipe",
        help="the model's format, as the quality_model stage's `format`: llmpipe (written by `llmpipe "
        "quality train`, the default) or fasttext (a supervised fastText .bin/.ftz classifier)",
    )
    c.add_argument(
        "--label",
        metavar="LABEL",
        help="--format fasttext: the label whose probability is the score (e.g. __label__hq)",
    )
    c.add_argument(
        "--target-retention",
        required=True,
        type=float,
        metavar="R",
        help="fraction of words to keep, e.g. 0.3",
    )
    c.add_argument(
        "--sample-docs",
        type=int_at_least(1),
        default=200_000,
        metavar="N",
        help="calibrate on the first N documents of the inputs (default 200,000)",
    )
    c.set_defaults(func=run_calibrate)

    k = qs.add_parser("check", help="run the heuristic filters on inputs and count drops by reason")
    k.add_argument("inputs", nargs="+", metavar="INPUT")
    k.add_argument("--config", type=Path, help="curate config whose filter sections to use")
    k.set_defaults(func=run_check)


#: bad records listed one by one on stderr (the rest are counted)
_SAY_BAD = 20


def iter_texts(inputs: list[str], chunk_lines: int = 0, bad: Counter[str] | None = None) -> Iterator[str]:
    """Document texts of the inputs (any format `llmpipe curate` reads). A bad record (a file cut
    short, a line that is not JSON ...) is not read: each is said on stderr and counted by reason
    in ``bad``."""
    from llmpipe.curate.steps import read_documents
    from llmpipe.io.config import ReadConfig
    from llmpipe.io.discover import discover_inputs
    from llmpipe.io.records import Bad

    cfg = ReadConfig()
    seen: Counter[str] = bad if bad is not None else Counter()
    found = discover_inputs(inputs)
    for s in found.skipped:  # as curate lists them: nothing left out silently
        print(f"llmpipe: skipped {s}", file=sys.stderr)
    for path in found.files:

        def on_bad(b: Bad, name: str = str(path)) -> None:
            seen[b.reason] += 1
            if seen.total() <= _SAY_BAD:
                detail = f" ({b.detail})" if b.detail else ""
                print(f"llmpipe: {name}: {b.location}: {b.reason}{detail}: not read", file=sys.stderr)
            elif seen.total() == _SAY_BAD + 1:
                print("llmpipe: more bad records not read (not listed)", file=sys.stderr)

        for batch in read_documents(path, path.name, cfg, on_bad):
            for text in batch.column("text").to_pylist():
                if not text or not text.strip():
                    continue
                if chunk_lines > 0:
                    lines = text.splitlines()
                    for i in range(0, len(lines), chunk_lines):
                        part = "\n".join(lines[i : i + chunk_lines]).strip()
                        if part:
                            yield part
                else:
                    yield text


def read_labelled(paths: list[str], positive_label: str) -> tuple[list[str], list[str]]:
    """(positive, negative) texts of JSONL files of ``{"text": ..., "label": ...}`` records."""
    pos: list[str] = []
    neg: list[str] = []
    for name in paths:
        path = Path(name)
        if not path.is_file():
            raise InputError(f"--labelled: {path} does not exist")
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    text, label = rec["text"], rec["label"]
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise InputError(
                        f"{path}:{n}: expected a JSON object with text and label ({e})"
                    ) from None
                if not isinstance(text, str):
                    raise InputError(f"{path}:{n}: text must be a string")
                if text.strip():
                    label = str(label).lower() if isinstance(label, bool) else str(label)
                    (pos if label == positive_label else neg).append(text)
    return pos, neg


def parse_char_ngrams(spec: str) -> list[int]:
    if spec.strip() == "0":
        return [0, 0]
    lo, sep, hi = spec.partition("-")
    try:
        out = [int(lo), int(hi if sep else lo)]
    except ValueError:
        raise ConfigError(f"--char-ngrams must be MIN-MAX (e.g. 3-5) or 0, not {spec!r}") from None
    if not 1 <= out[0] <= out[1] <= 16:
        raise ConfigError(f"--char-ngrams must satisfy 1 <= MIN <= MAX <= 16, not {spec!r}")
    return out


def run_train(args: argparse.Namespace) -> int:
    from llmpipe.quality import QualityModel, roc_auc

    if not args.labelled and not (args.positive and args.negative):
        raise ConfigError("give --positive and --negative files, or --labelled JSONL files")
    pos = list(iter_texts(args.positive, args.chunk_lines)) if args.positive else []
    neg = list(iter_texts(args.negative, args.chunk_lines)) if args.negative else []
    lp, ln = read_labelled(args.labelled, args.positive_label)
    pos += lp
    neg += ln
    if not pos or not neg:
        raise InputError(
            f"training needs text on both sides: {len(pos)} positive, {len(neg)} negative documents"
        )
    if not 0.0 <= args.holdout < 1.0:
        raise ConfigError(f"--holdout must be in [0, 1), not {args.holdout}")
    rng = random.Random(args.seed)
    rng.shuffle(pos)
    rng.shuffle(neg)
    hp, hn = int(len(pos) * args.holdout), int(len(neg) * args.holdout)
    chars = parse_char_ngrams(args.char_ngrams)
    train_cfg = json.dumps(
        {"bits": args.bits, "epochs": args.epochs, "lr": args.lr, "seed": args.seed, "char_ngrams": chars}
    )
    model = QualityModel.train(pos[hp:], neg[hn:], train_cfg)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(args.out))
    print(f"trained on {len(pos) - hp:,} positive and {len(neg) - hn:,} negative documents -> {args.out}")
    if hp and hn:
        scores = model.score(pos[:hp] + neg[:hn])
        auc = roc_auc(scores, [1] * hp + [0] * hn)
        print(f"held-out ROC AUC {auc:.4f} ({hp:,} positive, {hn:,} negative)")
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    import numpy as np
    import pyarrow as pa

    from llmpipe.curate.stages.quality_model import QualityModelFilter, calibrate
    from llmpipe.io.fs import not_a_file

    if not 0.0 < args.target_retention <= 1.0:
        raise ConfigError(f"--target-retention must be in (0, 1], not {args.target_retention}")
    if why := not_a_file(args.model):
        if why == "does not exist":
            why = "no such model file (write one with `llmpipe quality train`)"
        raise InputError(f"--model {args.model}: {why}")
    if args.format == "fasttext" and not args.label:
        raise ConfigError(
            "--format fasttext needs --label, the label whose probability is the score (__label__hq)"
        )
    if args.format == "llmpipe" and args.label:
        raise ConfigError("--label is only read with --format fasttext")
    # the quality_model stage's own loading and scoring: the scores a curate run would give
    cfg = QualityModelFilter.Config(enabled=True, model=str(args.model), format=args.format, label=args.label)
    stage = QualityModelFilter(cfg, options={"format": "--format fasttext --label LABEL", "label": "--label"})
    _ = stage.model  # a model file that is not one: one line before the inputs are read
    texts = list(iter_texts(args.inputs))[: args.sample_docs]
    if not texts:
        raise InputError("no documents in the inputs")
    scores = stage.score(pa.array(texts, pa.large_string()))
    words = np.asarray([len(t.split()) for t in texts])
    thr = calibrate(scores, words, args.target_retention)
    kept = words[scores >= thr].sum() / max(words.sum(), 1)
    print(f"threshold {thr:.6f} keeps {100 * kept:.2f}% of {words.sum():,} words ({len(texts):,} documents)")
    fmt = f", format: fasttext, label: '{args.label}'" if args.format == "fasttext" else ""
    print(f"curate config:  quality_model: {{enabled: true, model: {args.model}{fmt}, threshold: {thr:.6f}}}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from llmpipe.curate.settings import CurateConfig
    from llmpipe.quality import (
        C4Config,
        FineWebConfig,
        GopherQualityConfig,
        GopherRepetitionConfig,
        QualityConfig,
        evaluate,
    )

    cfg = CurateConfig.load(args.config)

    def part(name: str, base: type[Any]) -> Any:
        st = cfg.stages[name]
        return base(**{k: getattr(st, k) for k in base.__dataclass_fields__}) if st.enabled else None

    qc = QualityConfig(
        gopher_repetition=part("gopher_repetition", GopherRepetitionConfig),
        gopher_quality=part("gopher_quality", GopherQualityConfig),
        c4=part("c4", C4Config),
        fineweb=part("fineweb", FineWebConfig),
    )
    bad: Counter[str] = Counter()
    texts = list(iter_texts(args.inputs, bad=bad))
    verdicts = evaluate(texts, qc, all_reasons=False)
    reasons = Counter(v.reasons[0] for v in verdicts if v.reasons)
    kept = sum(v.keep for v in verdicts)
    print(f"kept {kept:,} of {len(texts):,} documents")
    for r, n in reasons.most_common():
        print(f"  {r:<45} {n:>8,}")
    if bad:  # what a curate run would quarantine: never a silent "0 of 0"
        print(f"not read: {bad.total():,} bad record(s) (curate quarantines them)")
        for r, n in bad.most_common():
            print(f"  {r:<45} {n:>8,}")
    return 0
