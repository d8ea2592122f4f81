"""`llmpipe ablate` end to end: web text curated with the default config and with the filters off,
one proxy each, bits per byte on the same reference text, the report rendered in headless Chromium."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from llmpipe.cli import main

FILTERS = ("language", "gopher_repetition", "gopher_quality", "c4", "fineweb")


def test_ablate_two_curations_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    raw = data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz"
    off = tmp_path / "filters_off.yaml"
    off.write_text("".join(f"{s}:\n  enabled: false\n" for s in FILTERS))
    dirs = {"default": tmp_path / "default", "filters_off": tmp_path / "filters_off"}
    for name, out in dirs.items():
        args = ["curate", str(raw), "--out", str(out), "--seq-len", "64", "--vocab-size", "512", "--quiet"]
        assert main(args + (["--config", str(off)] if name == "filters_off" else [])) == 0
    kept = {
        n: json.loads((d / "stats.json").read_text())["retention"]["word_fraction"] for n, d in dirs.items()
    }
    assert kept["default"] < kept["filters_off"]
    ref = tmp_path / "ref.txt"
    ref.write_text((data_dir / "reference/books/wonderland.txt").read_text()[30_000:36_000])
    abl = tmp_path / "abl"
    cmd = ["ablate", str(dirs["default"]), str(dirs["filters_off"]), "--out", str(abl), "--text", str(ref),
           "--tokens", "20000", "--config", str(ROOT / "configs/train/tiny.yaml")]  # fmt: skip
    assert main(cmd) == 0
    rows = json.loads((abl / "results.json").read_text())
    assert [r["name"] for r in rows] == ["default", "filters_off"]
    for r in rows:
        assert 0.5 < r["bpb"] < 8.0 and r["eval_bytes"] == len(ref.read_text().encode())
        assert r["steps"] == 40 and r["train_tokens"] == 40 * 8 * 64  # the same budget
        assert "seed: 0" in r["config"] and r["job"]["torchrun_args"][-1] == "--checkpoint.keep=1"
        assert r["retention"] == pytest.approx(kept[r["name"]])
    with open(abl / "results.csv") as f:
        assert [row["name"] for row in csv.DictReader(f)] == ["default", "filters_off"]
    # resumable: finished proxies are skipped, the table rewritten from their results
    stamp = [(abl / "proxies" / n / "result.json").stat().st_mtime_ns for n in dirs]
    assert main(cmd) == 0
    assert [(abl / "proxies" / n / "result.json").stat().st_mtime_ns for n in dirs] == stamp
    html = (abl / "report.html").read_text()
    assert html.count("<svg") == 1 and "filters_off" in html and "gopher_quality" in html
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert exe, "headless Chromium is needed"
    png = tmp_path / "report.png"
    subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", "--window-size=1200,900", (abl / "report.html").as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    img = Image.open(png).convert("RGB")
    assert img.size == (1200, 900)
    assert max(ImageStat.Stat(img).stddev) > 10  # drawn, not blank
    assert any(c == (0x3B, 0x7D, 0xD8) for _, c in img.getcolors(1 << 24) or [])  # the first bar
    assert main(["ablate", str(dirs["default"]), "--out", str(abl), "--text", str(ref)]) == 2
