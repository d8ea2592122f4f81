"""The URL filter: decision-for-decision parity with datatrove's URLFilter (its shipped lists) on every
record URI of ../shared/data/web plus URLs built from those lists and ordinary domains; as a curate
stage before extraction (drop reasons, counts, identical shards for 1 and 2 workers); bad list paths."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
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
        shutil.copyfile(web / name, inputs / name)  # a copy: symlinks out of the inputs are not read
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


def test_a_blocklist_that_is_no_ut1_tree_is_one_line_before_any_work(tmp_path: Path) -> None:
    """A blocklist file that is not an archive (a plain list of domains) and an archive cut short or
    corrupt are said as such, not as "does not exist", when the stage is built (curate: before any
    stage runs, not from a worker); a .tar and a .tar.gz of a UT1 tree load the same lists."""
    import gzip
    import io
    import tarfile

    ut1 = tmp_path / "ut1"
    (ut1 / "adult").mkdir(parents=True)
    (ut1 / "adult" / "domains").write_text("".join(f"site{i}.com\n" for i in range(5000)))
    (ut1 / "adult" / "urls").write_text("example.org/listed/page\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(ut1, arcname="blacklists")
    (tmp_path / "ut1.tar").write_bytes(buf.getvalue())
    packed = gzip.compress(buf.getvalue(), mtime=0)
    (tmp_path / "ut1.tar.gz").write_bytes(packed)
    (tmp_path / "cut.tar.gz").write_bytes(packed[: len(packed) // 2])
    (tmp_path / "head.tar.gz").write_bytes(packed[:30])
    corrupt = bytearray(packed)
    corrupt[len(packed) // 2 : len(packed) // 2 + 64] = bytes(64)
    (tmp_path / "corrupt.tar.gz").write_bytes(bytes(corrupt))
    raw = bytearray(buf.getvalue())  # a .tar whose last member's header is corrupt: tarfile ends there
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
        last = max(m.offset for m in tar.getmembers())
    raw[last + 10 : last + 20] = b"x" * 10
    (tmp_path / "header.tar").write_bytes(bytes(raw))
    (tmp_path / "doms.txt").write_text("site1.example.com\n")
    (tmp_path / "list.tar.gz").write_text("site1.example.com\n")  # a plain list, named as an archive
    batch = pa.record_batch(
        {
            "meta": [
                json.dumps({"url": u})
                for u in ("http://www.site7.com/a", "example.org/listed/page", "http://site7.org/")
            ]
        }
    )
    for name in ("ut1", "ut1.tar", "ut1.tar.gz"):
        stage = UrlFilter(UrlFilter.Config(enabled=True, blocklists=[str(tmp_path / name)]))
        assert stage.reasons(batch) == ["url_domain", "url_url", None], name
    cases = {
        "doms.txt": "doms.txt exists but is not a directory or a .tar/.tar.gz archive of UT1 lists",
        "list.tar.gz": "list.tar.gz exists but is not a directory or a .tar/.tar.gz archive of UT1 lists",
        "cut.tar.gz": "cut.tar.gz: the archive is unreadable",
        "head.tar.gz": "head.tar.gz: the archive is unreadable",
        "corrupt.tar.gz": "corrupt.tar.gz: the archive is unreadable",
        "header.tar": "header.tar: the archive is unreadable (a corrupt member header at byte",
    }
    for name, message in cases.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            UrlFilter(UrlFilter.Config(enabled=True, blocklists=[str(tmp_path / name)]))
    # curate: the one line, before any stage runs
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "words " * 20, "url": "http://a.example/"}) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"url_filter: {{enabled: true, blocklists: [{tmp_path / 'doms.txt'}]}}\n")
    p = run_cli(
        "curate", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "o"), "--config", str(cfg), check=False
    )
    assert p.returncode == 2 and p.stderr.startswith(
        f"llmpipe: error: url_filter.blocklists: {tmp_path / 'doms.txt'} exists"
    )
    assert len(p.stderr.strip().splitlines()) == 1 and "stages:" not in p.stdout, (p.stdout, p.stderr)


def test_a_dotted_field_reads_the_url_of_nested_metadata(tmp_path: Path) -> None:
    """Dolma-style records keep their URL at ``metadata.url``: ``field: metadata.url`` finds it (the
    reader keeps the nested metadata), a record without it falls back to a top-level ``url``, and one
    with neither is counted as without a URL; a top-level key named ``metadata.url`` comes first."""
    domains = tmp_path / "domains.txt"
    domains.write_text("blocked-site.com\n")
    rows = [
        {"id": "nested-blocked", "metadata": {"url": "http://www.blocked-site.com/a", "date": "2020"}},
        {"id": "nested-fine", "metadata": {"url": "http://fine-site.com/b"}},
        {"id": "top-blocked", "url": "http://blocked-site.com/c", "metadata": {"date": "2020"}},
        {"id": "none", "metadata": {"link": "http://blocked-site.com/d"}},
        {
            "id": "literal",
            "metadata.url": "http://blocked-site.com/e",
            "metadata": {"url": "http://ok-site.com"},
        },
        {"id": "not-a-string", "metadata": {"url": ["http://blocked-site.com/f"]}},
    ]
    src = tmp_path / "dolma.jsonl"
    src.write_text(
        "".join(
            json.dumps({**r, "text": f"a page of words number {i} " * 8}) + "\n" for i, r in enumerate(rows)
        )
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"url_filter: {{enabled: true, field: metadata.url, domain_lists: [{domains}]}}\n"
        + "".join(
            f"{s}: {{enabled: false}}\n"
            for s in ("length", "language", "gopher_repetition", "gopher_quality")
        )
        + "".join(f"{s}: {{enabled: false}}\n" for s in ("c4", "fineweb", "exact_dedup", "near_dedup"))
        + "pack: {seq_len: 16, samples_per_shard: 50, val_fraction: 0.0}\ntokenizer: {vocab_size: 300}\n"
    )
    out = tmp_path / "out"
    run_cli("curate", str(src), "--out", str(out), "--config", str(cfg))
    stats = json.loads((out / "stats.json").read_text())
    st = next(s for s in stats["stages"] if s["name"] == "url_filter")
    assert st["dropped"] == {"url_domain": 3}, st
    dropped = sorted(e["id"].rsplit("/", 1)[-1] for e in st["examples"]["url_domain"])
    assert dropped == ["literal", "nested-blocked", "top-blocked"], st["examples"]
    assert st["counters"]["documents_without_url"] == 2
    with pytest.raises(ConfigError, match=r"field must name a metadata field .* not 'metadata\.'"):
        from llmpipe.curate.settings import CurateConfig

        CurateConfig.from_mapping({"url_filter": {"field": "metadata."}})
