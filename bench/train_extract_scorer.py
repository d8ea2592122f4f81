"""Train the block scorer of llmpipe's main-text extraction (python/llmpipe/io/extract_scorer.json).

Data: the four fifths of trafilatura's evaluation pages that bench/bench_extract_f1.py does NOT hold
out (every 5th page in file-name order is held out and never read here). Each page is rendered the
two ways llmpipe's extractor renders it (resiliparse's main-content pass with the skip list, and all
visible text for the fallback); a block that holds more of the page's ``with`` snippets than of its
``without`` snippets is a positive example, the reverse a negative one, the rest unlabelled. The
features are ``llmpipe.io.extract.features``, the very function the extractor calls.

The model is scikit-learn's ``HistGradientBoostingClassifier`` (fixed seed, no early stopping, so the
same data gives the same trees); its trees are written as plain JSON arrays, which
``llmpipe.io.extract.BlockScorer`` walks with numpy (no scikit-learn at run time, no pickle). The
threshold on the trees' log-odds is the one with the best pooled F1 in a 5-fold cross-validation over
the training pages (folds by page), through the exported trees themselves, so the export is checked too.

Usage: python bench/train_extract_scorer.py [--out PATH] [--folds 5]
Needs scikit-learn (the ``classify`` extra) and the data under ../shared/data/html.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extract_f1 import Page, Score, eval_pages  # noqa: E402
from llmpipe.io.extract import FEATURES, Block, BlockScorer, Boilerplate, _render, decode, features, mark_body  # noqa: E402
from resiliparse.parse.html import HTMLTree  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "python" / "llmpipe" / "io" / "extract_scorer.json"
PARAMS = {"max_iter": 30, "learning_rate": 0.3, "max_depth": 4}
CUTS = (0.25, 0.3, 0.35, 0.4, 0.45, 0.5)  # probabilities tried as the keep threshold


@dataclass
class Rendered:
    page: Page
    main: list[Block]
    main_x: np.ndarray
    every: list[Block]
    every_x: np.ndarray


def render(page: Page) -> Rendered:
    tree = HTMLTree.parse(decode(page.body))
    mark_body(tree)
    main = Boilerplate.blocks(_render(tree, True, True, Boilerplate.skip))
    every = Boilerplate.blocks(_render(tree, True, False, ()))
    return Rendered(page, main, features(main), every, features(every))


def labels(blocks: list[Block], page: Page) -> list[int]:
    out = []
    for b in blocks:
        pos = sum(s in b.text for s in page.with_)
        neg = sum(s in b.text for s in page.without)
        out.append(1 if pos > neg else 0 if neg > pos else -1)
    return out


def fit(pages: list[Rendered]) -> dict:
    from sklearn.ensemble import HistGradientBoostingClassifier

    xs, ys = [], []
    for r in pages:
        for blocks, rows in ((r.main, r.main_x), (r.every, r.every_x)):
            for row, y in zip(rows, labels(blocks, r.page), strict=True):
                if y >= 0:
                    xs.append(row)
                    ys.append(y)
    model = HistGradientBoostingClassifier(**PARAMS, early_stopping=False, random_state=0)
    model.fit(np.asarray(xs), np.asarray(ys))
    depth = max(int(p.nodes["depth"].max()) for (p,) in model._predictors)
    feature, threshold, value = [], [], []
    for (predictor,) in model._predictors:
        f, t, v = complete(predictor.nodes, depth)
        feature.append(f)
        threshold.append(t)
        value.append(v)
    out = {
        "features": list(FEATURES),
        "params": PARAMS,
        "depth": depth,
        "base": float(np.ravel(model._baseline_prediction)[0]),
        "threshold_log_odds": 0.0,
        "feature": feature,
        "threshold": threshold,
        "value": value,
    }
    check = np.asarray(xs)
    ours = BlockScorer(out).score(check)
    assert np.allclose(ours, model._raw_predict(check).ravel()), "exported trees disagree with scikit-learn"
    return out


def complete(nodes: np.ndarray, depth: int) -> tuple[list[int], list[float], list[float]]:
    """A scikit-learn tree as a complete tree of ``depth`` levels (breadth-first inner nodes, then
    leaves): a leaf above the last level becomes inner nodes that send everything left (threshold
    1e300), with its value in every leaf below it."""
    inner = 2**depth - 1
    feature, threshold, value = [0] * inner, [1e300] * inner, [0.0] * (inner + 1)

    def fill(node: int, pos: int, level: int) -> None:
        if nodes["is_leaf"][node]:
            first = pos
            for _ in range(depth - level):
                first = 2 * first + 1
            span = 2 ** (depth - level)
            for leaf in range(first - inner, first - inner + span):
                value[leaf] = float(nodes["value"][node])
            return
        feature[pos] = int(nodes["feature_idx"][node])
        threshold[pos] = float(nodes["num_threshold"][node])
        fill(int(nodes["left"][node]), 2 * pos + 1, level + 1)
        fill(int(nodes["right"][node]), 2 * pos + 2, level + 1)

    fill(0, 0, 0)
    return feature, threshold, value


def text(blocks: list[Block], keep: list[bool]) -> str:
    kept = [b for b, k in zip(blocks, keep, strict=True) if k]
    return "".join(("\n\n" if b.para else "\n") + b.text for b in kept).strip()


def extract(r: Rendered, scorer: BlockScorer, cut: float) -> str:
    """Boilerplate.main_text with this scorer and log-odds cut, as the threshold was chosen: without the
    two rules added after it (on the fallback over all visible text a block must also pass the context
    rules; a page with no block of near-text length or more has no main text), which were checked on
    these same training pages, in-sample."""
    keep = (scorer.score(r.main_x) > cut).tolist() if r.main else []
    kept = sum(b.chars for b, k in zip(r.main, keep, strict=True) if k)
    if kept < Boilerplate.min_main_chars and r.every:
        keep_all = (scorer.score(r.every_x) > cut).tolist()
        if sum(b.chars for b, k in zip(r.every, keep_all, strict=True) if k) > 1.5 * kept:
            return text(r.every, keep_all)
    return text(r.main, keep)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    pages = [render(p) for p in eval_pages() if not p.held_out]
    print(f"{len(pages)} training pages (the held-out fifth is not read)", flush=True)
    scores = {c: Score() for c in CUTS}
    for k in range(args.folds):
        train = [r for i, r in enumerate(pages) if i % args.folds != k]
        scorer = BlockScorer(fit(train))
        for i, r in enumerate(pages):
            if i % args.folds == k:
                for c in CUTS:
                    scores[c].add(extract(r, scorer, math.log(c / (1 - c))), r.page)
        print(f"fold {k + 1}/{args.folds} done", flush=True)
    best = max(CUTS, key=lambda c: scores[c].prf()[2])
    for c in CUTS:
        p, rc, f = scores[c].prf()
        print(
            f"  cross-validated, keep above p={c}: precision {p:.3f} recall {rc:.3f} F1 {f:.4f}{' <-' if c == best else ''}"
        )
    model = fit(pages)
    model["threshold_log_odds"] = math.log(best / (1 - best))
    args.out.write_text(json.dumps(model, separators=(",", ":")) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} kB, {len(model['feature'])} trees, depth {model['depth']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
