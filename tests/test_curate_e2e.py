"""End to end on real crawl text: curate, verify, and check the shards against an independent oracle."""

from __future__ import annotations

import gzip
import json
import unicodedata
from pathlib import Path

import pyarrow.ipc as ipc
import pytest
from conftest import ROOT, run_cli

# val_fraction 0 keeps every sample in train, in stream order, so the test can rebuild the stream.
SMALL = (
    "pack:\n  seq_len: 128\n  samples_per_shard: 200\n  val_fraction: 0.0\ntokenizer:\n  vocab_size: 1000\n"
    # the oracle below knows normalise, length and exact dedup only: quality stages and near dedup
    # are off (tests/test_dedup_stage.py and tests/test_quality*.py check those against their peers)
    + "".join(
        f"{s}:\n  enabled: false\n"
        for s in ("language", "gopher_repetition", "gopher_quality", "c4", "fineweb", "near_dedup", "pii")
    )
)


def _oracle_kept(path: Path, min_words: int = 5) -> list[str]:
    """What the default stages keep, computed here without llmpipe: normalise, length, exact dedup."""
    import re

    kept: dict[str, tuple[str, str]] = {}
    order: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    for rec in records:
        t = unicodedata.normalize("NFC", rec["text"])
        t = re.sub(r"\r\n?", "\n", t)
        t = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufeff]", "", t)
        t = re.sub(r"[ \t]+\n", "\n", t)
        t = re.sub(r"\n{3,}", "\n\n", t).strip()
        if len(t.split()) < min_words:
            continue
        key = " ".join(t.lower().split())
        doc_id = f"{path.name}/{rec['id']}"
        if key not in kept or doc_id < kept[key][0]:
            kept[key] = (doc_id, t)
        order.append(doc_id)
    winners = {v[0]: v[1] for v in kept.values()}
    return [winners[i] for i in order if i in winners]


@pytest.fixture(scope="module")
def curated(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path]:
    src = data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz"
    out = tmp_path_factory.mktemp("curate") / "shards"
    cfg = out.parent / "small.yaml"
    cfg.write_text(SMALL)
    run_cli("curate", str(src), "--out", str(out), "--config", str(cfg))
    return src, out


def test_outputs_exist_and_verify(curated: tuple[Path, Path]) -> None:
    _, out = curated
    for name in ("manifest.json", "stats.json", "tokenizer.json", "quarantine.jsonl"):
        assert (out / name).is_file(), name
    assert not (out / ".llmpipe-work").exists(), "the work directory is removed after a successful run"
    p = run_cli("inspect", str(out), "--verify")
    assert p.returncode == 0
    rows = json.loads((out / "manifest.json").read_text())["splits"]["train"]["rows"]
    p = run_cli("inspect", str(out), "--sample", str(rows - 1), "--chars", "20")
    assert f"train sample {rows - 1}, decoded" in p.stdout
    # a sample past the split, or no characters: one line, not a wrapped-around or empty sample
    for args, says in (
        (
            ["--sample", str(rows)],
            f"--sample {rows}: the train split has {rows:,} samples (0 to {rows - 1:,})",
        ),
        (["--chars", "0"], "--chars: must be >= 1, got 0"),
        (["--chars", "-5"], "--chars: must be >= 1, got -5"),
    ):
        p = run_cli("inspect", str(out), *args, check=False)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)


def test_funnel_adds_up(curated: tuple[Path, Path]) -> None:
    _, out = curated
    stats = json.loads((out / "stats.json").read_text())
    names = [s["name"] for s in stats["stages"]]
    assert names[0] == "read" and names[-2:] == ["tokenize", "pack"]
    assert "exact_dedup" in names
    for s in stats["stages"]:
        assert s["docs_in"] == s["docs_out"] + sum(s["dropped"].values()), s["name"]
    for a, b in zip(stats["stages"], stats["stages"][1:], strict=False):
        assert a["docs_out"] == b["docs_in"], (a["name"], b["name"])
    assert stats["stages"][0]["docs_in"] == 697
    dedup = next(s for s in stats["stages"] if s["name"] == "exact_dedup")
    assert dedup["dropped"].get("exact_duplicate", 0) >= 1


def test_shards_decode_to_the_kept_documents(curated: tuple[Path, Path]) -> None:
    from tokenizers import Tokenizer as HFTokenizer

    src, out = curated
    manifest = json.loads((out / "manifest.json").read_text())
    tok = HFTokenizer.from_file(str(out / "tokenizer.json"))
    eos = manifest["tokenizer"]["eos_id"]
    width = manifest["seq_len"] + 1
    assert manifest["splits"]["val"]["rows"] == 0
    stream: list[int] = []
    shards = manifest["splits"]["train"]["shards"]
    for n, shard in enumerate(shards):
        table = ipc.open_file(str(out / shard["file"])).read_all()
        rows = table.column("tokens").combine_chunks().values.to_numpy().reshape(-1, width)
        valid = table.column("valid").to_pylist()
        for j, (row, v) in enumerate(zip(rows, valid, strict=True)):
            last = n == len(shards) - 1 and j == len(rows) - 1
            # consecutive samples overlap by one token; the last sample is padded after `valid`
            stream.extend(row[:v] if last else row[: v - 1])
    docs, cur = [], []
    for t in stream:
        if t == eos:
            docs.append(tok.decode(cur, skip_special_tokens=False))
            cur = []
        else:
            cur.append(int(t))
    assert not cur, "the stream ends with EOS"
    expected = _oracle_kept(src)
    assert len(docs) == len(expected)
    assert docs == expected
    assert len({" ".join(d.lower().split()) for d in docs}) == len(docs), "no exact duplicates remain"


def test_bad_json_line_is_counted_and_quarantined(tmp_path: Path, data_dir: Path) -> None:
    # two real crawl documents (made-up text falls to the quality filters, and a run that keeps
    # nothing is an error) around a line cut short
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    good = [t for t in texts if 300 < len(t.split()) < 2000][:2]
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "a", "text": good[0]})
        + "\n"
        + '{"id": "b", "text": "cut off\n'
        + json.dumps({"id": "c", "text": good[1]})
        + "\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pack:\n  seq_len: 16\ntokenizer:\n  vocab_size: 300\n  min_frequency: 1\n")
    out = tmp_path / "o"
    run_cli("curate", str(src), "--out", str(out), "--config", str(cfg))
    stats = json.loads((out / "stats.json").read_text())
    read = stats["stages"][0]
    assert read["docs_in"] == 3 and read["docs_out"] == 2
    assert read["dropped"] == {"quarantined_invalid_json": 1}
    q = [json.loads(x) for x in (out / "quarantine.jsonl").read_text().splitlines()]
    assert len(q) == 1 and q[0]["reason"] == "invalid_json" and q[0]["location"] == "line 2"
    strict = run_cli(
        "curate", str(src), "--out", str(tmp_path / "o2"), "--config", str(cfg), "--strict", check=False
    )
    assert strict.returncode == 2 and "invalid_json" in strict.stderr and "Traceback" not in strict.stderr


def test_a_tokenizer_smaller_than_asked_is_noted(tmp_path: Path) -> None:
    """Too little kept text for the vocabulary asked: the run says so, and the manifest holds the size
    the tokenizer has."""
    out = tmp_path / "o"
    notes = ROOT / "examples" / "raw" / "notes"
    p = run_cli(
        "curate", str(notes), "--out", str(out), "--config", "sample", "--vocab-size", "5000", "--quiet"
    )
    have = json.loads((out / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    assert 256 < have < 5000
    assert f"tokenizer: note: the kept text gave only {have:,} of the 5,000 ids asked for" in p.stdout
