"""The funnel: arithmetic of a real curate run with every quality stage, report.html rendered in
headless Chromium, and `llmpipe report DIR` in the terminal."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

WORD_STAGES_END = "tokenize"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "shards"
    run_cli(
        "curate",
        str(ROOT / "examples" / "raw"),
        "--out",
        str(out),
        "--config",
        str(ROOT / "configs/curate/sample.yaml"),
    )
    return out


def test_funnel_adds_up(run_dir: Path) -> None:
    stats = json.loads((run_dir / "stats.json").read_text())
    stages = stats["stages"]
    names = [s["name"] for s in stages]
    for quality_stage in ("language", "gopher_repetition", "gopher_quality", "c4", "fineweb", "pii"):
        assert quality_stage in names
    assert (
        names.index("language")
        < names.index("gopher_repetition")
        < names.index("exact_dedup")
        < names.index("pii")
    )
    for s in stages:
        assert s["docs_in"] == s["docs_out"] + sum(s["dropped"].values()), s["name"]
    for a, b in zip(stages, stages[1:], strict=False):
        assert a["docs_out"] == b["docs_in"], (a["name"], b["name"])
    word_stages = stages[: names.index(WORD_STAGES_END)]
    for a, b in zip(word_stages[1:], word_stages[2:], strict=False):
        assert a["tokens_out"] == b["tokens_in"], (a["name"], b["name"])
    for s in word_stages:
        if s["name"] in ("normalize", "extract", "read"):
            continue  # rewriting stages: words in and out are counted on different text
        removed = s.get("counters", {}).get("words_removed_by_line_cleaning", 0)
        assert s["tokens_in"] == s["tokens_out"] + sum(s["dropped_tokens"].values()) + removed, s["name"]
    # the real filters drop something here, each with a named reason and examples
    dropped = {r for s in stages for r in s["dropped"]}
    assert {"other_language", "too_few_sentences"} <= dropped, dropped
    for s in stages[names.index("normalize") :]:  # (read's drops are the quarantine file's records)
        for reason in s["dropped"]:
            assert s["examples"].get(reason), (s["name"], reason)
    ret = stats["retention"]
    assert ret["docs_out"] == stages[-1]["docs_out"]
    assert ret["word_fraction"] == pytest.approx(ret["words_out"] / ret["words_in"])
    assert 0 < ret["word_fraction"] < 1


def test_report_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    html = (run_dir / "report.html").read_text()
    assert (
        "<svg" in html
        and "Token retention" in html
        and "http" not in html.split("<body>")[1].split("xmlns")[0]
    )
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert exe, "headless Chromium is needed (apt-get install chromium; .ci/run installs it)"
    png = tmp_path / "report.png"
    subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", "--window-size=1000,1200", (run_dir / "report.html").as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    img = Image.open(png).convert("RGB")
    assert img.size == (1000, 1200)
    # not blank: many colours, and the chart's bar colour is on the page
    assert len(img.getcolors(1 << 24) or []) > 20
    assert max(ImageStat.Stat(img).stddev) > 20
    assert any(c == (0x3B, 0x7D, 0xD8) for _, c in img.getcolors(1 << 24) or [])


def test_report_command_prints_the_funnel(run_dir: Path, tmp_path: Path) -> None:
    p = run_cli("report", str(run_dir))
    stats = json.loads((run_dir / "stats.json").read_text())
    for s in stats["stages"]:
        assert s["name"] in p.stdout
    assert "token retention" in p.stdout
    bad = run_cli("report", str(tmp_path), check=False)
    assert bad.returncode == 2 and "stats.json" in bad.stderr and "Traceback" not in bad.stderr


def test_a_damaged_stats_file_is_one_line_naming_the_key(run_dir: Path, tmp_path: Path) -> None:
    """A stranger's (or hand-edited) stats.json is data: each value the report reads is checked, and a
    bad one is one line naming its key, with --html too (report.html is not rewritten)."""
    from llmpipe.cli import main

    good = json.loads((run_dir / "stats.json").read_text())
    stage = good["stages"][1]
    cases = [
        ({**good, "stages": 5}, "stages is 5, not a list"),
        ({**good, "stages": [{**stage, "docs_in": "7"}]}, 'stages[0].docs_in is "7", not a count'),
        ({**good, "stages": [{**stage, "dropped": {"x": -1}}]}, "stages[0].dropped is"),
        ({**good, "stages": [{**stage, "examples": {"x": [1]}}]}, "stages[0].examples is"),
        ({**good, "retention": {"docs_in": None}}, "retention is"),
        ({**good, "quarantine": {"records": 2, "by_reason": []}}, "quarantine.by_reason is"),
    ]
    d = tmp_path / "d"
    d.mkdir()
    for stats, says in cases:
        (d / "stats.json").write_text(json.dumps(stats))
        for extra in ((), ("--html",)):
            p = run_cli("report", str(d), *extra, check=False)
            err = p.stderr.strip()
            assert p.returncode == 2 and len(err.splitlines()) == 1 and says in err, (says, err)
            assert not (d / "report.html").exists()
    (d / "stats.json").write_text(json.dumps(good))  # the real one reads
    assert main(["report", str(d)]) == 0


def test_counts_are_not_listed_as_drops(run_dir: Path) -> None:
    """The language stage counts kept documents per language: the report shows them apart from the drops."""
    html = (run_dir / "report.html").read_text()
    drops = html.split("<h2>Drops by reason</h2>", 1)[1].split("</table>", 1)[0]
    assert "lang:" not in drops
    others = html.split("<h2>Other counts</h2>", 1)[1].split("</table>", 1)[0]
    assert "lang:eng_Latn" in others
    text = run_cli("report", str(run_dir)).stdout
    language = next(line for line in text.splitlines() if line.startswith("language "))
    drops_part, counts_part = language.split("[counts: ", 1)
    assert "lang:" not in drops_part and "lang:eng_Latn" in counts_part
