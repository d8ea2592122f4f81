"""The funnel of a run (``Funnel``) and its publication: shards moved into place, then quarantine.jsonl,
stats.json, report.html and the manifest last."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmpipe.curate.quarantine import concatenate
from llmpipe.curate.report import write_report
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.workdir import CACHE, WORK, fault_point
from llmpipe.data.format import FORMAT_NAME, MANIFEST, TOKENIZER_FILE, atomic_write_json
from llmpipe.lock import LOCK_FILE
from llmpipe.outdir import OutputDir

#: the names of the shards a run writes (``llmpipe.data.writer``): only these are replaced or removed
SHARD_NAME = re.compile(r"(train|val)-\d{5,}\.arrow")
#: the marker a finished run writes last: ``{"fingerprint": ...}`` of its inputs, config and tokenizer
DONE = ".llmpipe-done.json"


def finished_stats(done: bytes | str, stats: bytes | str, fp: str) -> dict[str, Any] | None:
    """The stats of a finished run from its done marker's and stats.json's text, when the marker records
    fingerprint ``fp``; None when it records another, or when either file is damaged (the run is then
    done again, not trusted)."""
    try:
        marker, numbers = json.loads(done), json.loads(stats)
    except (ValueError, RecursionError):
        return None
    if not isinstance(marker, dict) or marker.get("fingerprint") != fp or not isinstance(numbers, dict):
        return None
    return numbers


def _earlier_run(out: Path) -> bool:
    """``out`` holds a curate run: its done marker, its work directory or an llmpipe manifest."""
    if (out / DONE).is_file() or (out / WORK / "fingerprint.json").is_file():
        return True
    try:
        return bool(json.loads((out / MANIFEST).read_text()).get("format") == FORMAT_NAME)
    except (OSError, ValueError, AttributeError):
        return False


#: what a curate run writes into --out (a re-run or a resumed run finds only these)
CURATE_OUT = OutputDir(
    "output directory",
    frozenset(
        {
            MANIFEST,
            TOKENIZER_FILE,
            "stats.json",
            "report.html",
            "quarantine.jsonl",
            DONE,
            WORK,
            CACHE,
            LOCK_FILE,
        }
    ),
    (SHARD_NAME,),
    _earlier_run,
)


class Funnel:
    """Every stage's counts in pipeline order, the quarantined records and the input formats of a run."""

    def __init__(self) -> None:
        self.stages: dict[str, StageCounts] = {}  # insertion order is the funnel's order
        self.quarantine: Counter[str] = Counter()  # quarantined records by reason (the records: on disk)
        self.formats: Counter[str] = Counter()
        self.skipped: list[str] = []  # what discovery could not read

    def add(self, markers: list[dict[str, Any]]) -> None:
        """Merge the results of one step over every input (its markers, in input order)."""
        for m in markers:
            for c in m["counts"]:
                self.stage(c["name"]).merge(StageCounts.from_dict(c))
            self.quarantine.update(m.get("quarantine", {}))
            self.formats.update(m.get("formats", []))  # the formats of the files the part starts

    def stage(self, name: str) -> StageCounts:
        """The counts of stage ``name`` (created empty, at the end of the funnel, on first use)."""
        return self.stages.setdefault(name, StageCounts(name))

    @property
    def input_words(self) -> int:
        """The words the run read: the funnel's input."""
        return self.stages["read"].tokens_in if "read" in self.stages else 0

    def stats(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """stats.json: every stage checked (in = out + dropped), retention, quarantine, formats."""
        stages = list(self.stages.values())
        for s in stages:
            s.check()
        first, last_words = stages[0], next(s for s in reversed(stages) if s.name == "tokenize")
        words_in = first.tokens_in
        words_kept = last_words.tokens_in - sum(last_words.dropped_tokens.values())
        return {
            "llmpipe_stats_version": 1,
            "tokens_unit": "words before the tokenize stage (whitespace-separated), BPE tokens from it on",
            "stages": [s.to_dict() for s in stages],
            "inputs": {
                "files": sum(self.formats.values()),
                "formats": dict(sorted(self.formats.items())),
                "skipped": self.skipped,
            },
            "quarantine": {
                "records": sum(self.quarantine.values()),
                "by_reason": dict(sorted(self.quarantine.items())),
                "file": "quarantine.jsonl",
            },
            "retention": {
                "docs_in": first.docs_in,
                "docs_out": stages[-1].docs_out,
                "doc_fraction": stages[-1].docs_out / first.docs_in if first.docs_in else 0.0,
                "words_in": words_in,
                "words_out": words_kept,
                "word_fraction": words_kept / words_in if words_in else 0.0,
                "tokens_out": manifest["counts"]["tokens"],
            },
        }


def write_outputs(
    out: Path,
    staging: Path,
    stats: dict[str, Any],
    quarantine: list[Path],
    log: Callable[[str], None],
) -> None:
    """``quarantine``: the per-input quarantine files, concatenated into quarantine.jsonl.

    Move new shards in (each by atomic rename), drop stale ones, then stats, report and manifest last."""
    manifest = json.loads((staging / MANIFEST).read_text())
    new = {e["file"] for split in manifest["splits"].values() for e in split["shards"]}
    old_manifest = out / MANIFEST
    if old_manifest.exists():  # the old manifest goes first: no manifest ever lists a missing shard
        old_manifest.unlink()
    for f in sorted(out.iterdir()):
        if SHARD_NAME.fullmatch(f.name) and f.name not in new:
            f.unlink()
    for name in sorted(new):
        os.replace(staging / name, out / name)
        fault_point(f"moved {name}")
    os.replace(staging / "tokenizer.json", out / "tokenizer.json")
    concatenate(quarantine, out / "quarantine.jsonl")  # the per-input files, in input order
    atomic_write_json(out / "stats.json", stats)
    fault_point("stats")
    write_report(out, stats)
    os.replace(staging / MANIFEST, out / MANIFEST)
    r = stats["retention"]
    log(
        f"curate: kept {r['docs_out']:,} of {r['docs_in']:,} documents, {r['words_out']:,} of {r['words_in']:,} "
        f"words ({100 * r['word_fraction']:.2f}%), {r['tokens_out']:,} tokens in {len(new)} shard(s) -> {out}"
    )
    skipped = stats["inputs"]["skipped"]
    if skipped:
        shown = "; ".join(skipped[:3]) + (f"; and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        log(
            f"curate: {len(skipped)} input path(s) not read ({shown}): see {out / 'stats.json'} inputs.skipped"
        )
