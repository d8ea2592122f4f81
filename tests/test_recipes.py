"""The FineWeb and DCLM recipes (configs/curate/fineweb.yaml, dclm.yaml) load and curate real crawl
data, their stages in the published order, with the URL filter running before extraction."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import run_cli
from llmpipe.config import config_file
from llmpipe.curate.settings import CurateConfig

ORDER = {
    # FineWeb: URL filter -> extraction -> language -> Gopher repetition -> Gopher quality -> C4 -> FineWeb
    # -> MinHash -> PII
    "fineweb": [
        "read",
        "url_filter",
        "extract",
        "language",
        "gopher_repetition",
        "gopher_quality",
        "c4",
        "fineweb",
    ]
    + ["near_dedup", "pii", "tokenize", "pack"],
    # DCLM: URL filter -> extraction -> RefinedWeb heuristics -> dedup (the classifier slot is off: no model)
    "dclm": ["read", "url_filter", "extract", "normalize", "length", "language", "gopher_repetition"]
    + ["gopher_quality", "exact_dedup", "near_dedup", "tokenize", "pack"],
}


def test_recipes_load_and_curate(data_dir: Path, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("wget-crawl-0001.warc.gz", "cc-main-2019-30-extracted.jsonl.gz"):
        (inputs / name).symlink_to(data_dir / "web" / name)
    for recipe, order in ORDER.items():
        cfg = CurateConfig.load(recipe)  # by name, from any directory
        assert cfg.stages["url_filter"].enabled and cfg.stages["url_filter"].banned_words == ["builtin"]
        assert cfg.stages["quality_model"].format == ("fasttext" if recipe == "dclm" else "llmpipe")
        small = yaml.safe_load(config_file(recipe, "curate").read_text())
        small["tokenizer"] = {"vocab_size": 300}
        small["pack"] = {"seq_len": 64, "val_fraction": 0.0}
        path = tmp_path / f"{recipe}.yaml"
        path.write_text(yaml.safe_dump(small))
        out = tmp_path / recipe
        run_cli("curate", str(inputs), "--out", str(out), "--config", str(path), "--workers", "1")
        stats = json.loads((out / "stats.json").read_text())
        assert [s["name"] for s in stats["stages"]] == order
        assert stats["retention"]["docs_out"] > 0
        st = {s["name"]: s for s in stats["stages"]}
        assert st["url_filter"]["docs_in"] == st["read"]["docs_out"]
