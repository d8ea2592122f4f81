"""The URL filter: decision-for-decision parity with datatrove's URLFilter (its shipped lists) on every
record URI of ../shared/data/web plus URLs built from those lists and ordinary domains; as a curate
stage before extraction (drop reasons, counts, identical shards for 1 and 2 workers); bad list paths."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import run_cli
from llmpipe.buffers import string_buffers
from llmpipe.curate.stages.url_filter import REASONS, UrlFilter, shipped
from llmpipe.errors import ConfigError
from url_corpus import ORDINARY, crawl_urls, list_urls

datatrove = pytest.importorskip("datatrove")  # the test-only oracle (requirements.in)
ASSETS = Path(datatrove.__file__).parent / "assets"
UT1 = ASSETS / "url_filterblacklistsv0_3_0.tar.gz"
#: datatrove's reasons -> llmpipe's
DT_REASONS = {
    "domain": "url_domain",
    "subdomain": "url_subdomain",
    "url": "url_url",
    "hard_blacklisted": "url_word",
    "soft_blacklisted": "url_soft_word",
    "blacklisted_subword": "url_subword",
}


def datatrove_config() -> UrlFilter.Config:
    """llmpipe pointed at the lists inside the installed datatrove wheel."""
    return UrlFilter.Config(
        enabled=True,
        blocklists=[str(UT1)],
        banned_words=[str(ASSETS / "banned_words.txt")],
        banned_subwords=[str(ASSETS / "banned_subwords.txt")],
        soft_banned_words=[str(ASSETS / "soft_banned_words.txt")],
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # tldextract 5.3 on datatrove's registered_domain
def test_parity_with_datatrove_url_filter(data_dir: Path) -> None:
    from datatrove.data import Document
    from datatrove.pipeline.filters.url_filter import URLFilter
    from tldextract import TLDExtract

    crawl = crawl_urls(data_dir / "web")
    assert len(set(crawl)) > 150  # the WARC/ARC record URIs and the JSONL documents' URLs
    urls = sorted(set(crawl + list_urls(ASSETS) + ORDINARY))
    stage = UrlFilter(datatrove_config())
    mine = [
        REASONS[c]
        for c in np.frombuffer(stage.core.judge_urls(string_buffers(pa.array(urls))), np.uint8).tolist()
    ]

    oracle = URLFilter()
    oracle.tldextractor = TLDExtract(suffix_list_urls=())  # the PSL snapshot tldextract bundles: no network
    theirs: list[str | None] = []
    for u in urls:
        if not u:
            theirs.append("url_missing")  # datatrove asserts a URL; llmpipe says it has none
            continue
        got = oracle.filter(Document(text="", id="x", metadata={"url": u}))
        theirs.append(None if got is True else DT_REASONS[got[1]])
    diff = [(u, m, t) for u, m, t in zip(urls, mine, theirs, strict=True) if m != t]
    assert not diff, diff[:20]
    # every rule decided some of them: the test covers each
    assert {r for r in mine} >= set(DT_REASONS.values()) | {None}, sorted({str(r) for r in mine})
    # the word lists llmpipe ships (``builtin``) are datatrove's
    for name in ("banned_words", "banned_subwords", "soft_banned_words"):
        assert shipped(f"{name}.txt").read_bytes() == (ASSETS / f"{name}.txt").read_bytes()


def test_stage_in_curate_workers_and_errors(data_dir: Path, tmp_path: Path) -> None:
    web = data_dir / "web"
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("wget-crawl-0000.warc.gz",):
        (inputs / name).symlink_to(web / name)
    # a JSONL whose records carry their URL in a field of another name
    rows = [
        {"text": "a page about gardening and tomatoes " * 5, "link": "https://garden.example.org/tomatoes"},
        {"text": "a page from a listed domain " * 5, "link": "http://www.0-1sex.com/index.html"},
        {"text": "a page without a link " * 5},
    ]
    (inputs / "links.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    domains = tmp_path / "domains.txt"
    domains.write_text("# plain list\nwww.semanticscholar.org\n")
    ut1 = tmp_path / "blacklists"  # a UT1 tree: one folder per category (the parity test reads the archive)
    for cat, listed in (("adult", "0-1sex.com\n0-1avsex.com\n"), ("gambling", "casino.example\n")):
        (ut1 / cat).mkdir(parents=True)
        (ut1 / cat / "domains").write_text(listed)
        (ut1 / cat / "urls").write_text("example.com/listed/page\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "url_filter:\n  enabled: true\n  field: link\n"
        f"  blocklists: [{ut1}]\n  domain_lists: [{domains}]\n"
        "  banned_words: [builtin]\n  banned_subwords: [builtin]\n  soft_banned_words: [builtin]\n"
        "length:\n  min_words: 1\n"
        "pack:\n  seq_len: 64\n  samples_per_shard: 200\n  val_fraction: 0.0\n"
        "tokenizer:\n  vocab_size: 300\n"
    )
    trees = []
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}"
        p = run_cli("curate", str(inputs), "--out", str(out), "--config", str(cfg), "--workers", workers)
        assert "read -> url_filter -> extract ->" in p.stdout
        trees.append(
            {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.glob("*.arrow"))}
        )
    assert trees[0] == trees[1] and trees[0]
    stats = json.loads((tmp_path / "out1" / "stats.json").read_text())
    names = [s["name"] for s in stats["stages"]]
    assert names.index("url_filter") == names.index("read") + 1 == names.index("extract") - 1
    st = stats["stages"][names.index("url_filter")]
    assert st["docs_in"] == st["docs_out"] + sum(st["dropped"].values())
    assert st["dropped"].get("url_domain", 0) >= 1  # the JSONL record from a UT1 domain
    assert st["counters"]["documents_without_url"] == 1  # the JSONL record without a link is kept
    # the plain list's host: its pages are dropped as url_subdomain (fqdn), the example has its URL
    examples = st["examples"].get("url_subdomain", [])
    assert st["dropped"].get("url_subdomain", 0) >= 1, st["dropped"]
    assert examples
    # the CLI's one line for a list that is not there
    bad = tmp_path / "bad.yaml"
    bad.write_text("url_filter:\n  enabled: true\n  blocklists: [/nonexistent/ut1]\n")
    p = run_cli("curate", str(inputs), "--out", str(tmp_path / "bad"), "--config", str(bad), check=False)
    assert p.returncode == 2 and p.stderr.startswith(
        "llmpipe: error: url_filter.blocklists: /nonexistent/ut1"
    )
    assert len(p.stderr.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="holds no 'domains'"):
        UrlFilter(UrlFilter.Config(enabled=True, blocklists=[str(tmp_path / "in")])).core  # noqa: B018
