"""The URL filter (FineWeb's first step): datatrove's ``URLFilter`` rules on each document's URL.

A document is dropped, first rule first, as ``url_domain`` (its registered domain is a listed
domain), ``url_subdomain`` (its full host name is), ``url_url`` (the URL is a listed URL),
``url_word`` (a banned word is one of the URL's words), ``url_soft_word`` (at least
``soft_word_threshold`` soft-banned words are) or ``url_subword`` (a banned subword occurs in the
URL reduced to lowercase letters and digits). The rules, the host parsing (tldextract's, with the
ICANN part of the Public Suffix List shipped in ``llmpipe/curate/url_lists``) and the thresholds are
datatrove 0.9's; the work is one Rust call per batch (``_core.UrlFilter``: hashed lists, one
Aho-Corasick automaton for the subwords).

It runs before extraction, on the record URI of crawl archives (``url`` in the metadata) and on the
``field`` of JSONL/Parquet records, so a blocked page costs no HTML parsing. A dotted ``field``
(``metadata.url``, as Dolma's records hold it) names a key inside the record's nested metadata; a
top-level key of that very name comes first. That lookup is Python's (one ``json.loads`` per
document), the rest the same Rust call.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tarfile
import zlib
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from llmpipe.buffers import string_buffers
from llmpipe.curate.stage import Filter, StageCounts, apply_reasons, counted
from llmpipe.curate.stages.read import raw_words
from llmpipe.errors import ConfigError

#: the verdict codes of ``_core.UrlFilter`` as drop reasons (0: keep)
REASONS: tuple[str | None, ...] = (
    None,
    "url_domain",
    "url_subdomain",
    "url_url",
    "url_word",
    "url_soft_word",
    "url_subword",
    "url_missing",
)
MISSING = 7
#: the lists shipped with llmpipe (``builtin``): datatrove 0.9's word lists and the Public Suffix List
BUILTIN = "builtin"
_WORD_LISTS = ("banned_words", "banned_subwords", "soft_banned_words")


def shipped(name: str) -> Path:
    """A file of ``llmpipe/curate/url_lists``."""
    return Path(str(resources.files("llmpipe") / "curate" / "url_lists" / name))


def psl_rules(text: str) -> list[str]:
    """The ICANN rules of a Public Suffix List (tldextract's parsing: the first word of each line that
    starts with a word character or ``.*!``, up to the private-domains marker)."""
    import re

    public = text.partition("// ===BEGIN PRIVATE DOMAINS===")[0]
    rules = [m.group(1) for m in re.finditer(r"^([.*!]*\w\S*)", public, re.UNICODE | re.MULTILINE)]
    # tldextract decodes punycode labels of a host before the lookup; the rules get their punycode
    # (ASCII) spelling as well so that an ``xn--`` host label meets its rule
    extra = []
    for r in rules:
        if not r.isascii():
            try:
                extra.append(".".join(_puny(label) for label in r.split(".")))
            except UnicodeError:
                continue
    return rules + extra


def _puny(label: str) -> str:
    return label if label.isascii() else "xn--" + label.encode("punycode").decode("ascii")


#: what a ``blocklists`` entry must be (said when it is not)
_BLOCKLIST = "a UT1 blocklist directory or a .tar/.tar.gz archive of one; docs/quality.md 'URL filter'"


def _read_lists(path: Path, what: str, keep: bool = True) -> list[tuple[str, bytes]]:
    """(kind, bytes) of every ``domains``/``urls`` file of a UT1 tree: a directory (one folder per
    category) or a .tar/.tar.gz of one (datatrove ships ``url_filterblacklistsv0_3_0.tar.gz``).
    Archive members are read in memory, never extracted, so their names cannot reach the file system.
    ``keep=False`` reads every list through (an archive that is cut short or corrupt raises here) but
    keeps none of its bytes: the config-time check."""
    out: list[tuple[str, bytes]] = []
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                if name in ("domains", "urls"):
                    out.append((name, (Path(root) / name).read_bytes() if keep else b""))
    elif path.is_file():
        try:
            with _open_archive(path, what) as tar:
                for m in sorted(tar.getmembers(), key=lambda m: m.name):
                    name = m.name.rsplit("/", 1)[-1]
                    member = tar.extractfile(m) if m.isfile() and name in ("domains", "urls") else None
                    if member is None:
                        continue
                    if keep:
                        out.append((name, member.read()))
                    else:
                        while member.read(1 << 20):
                            pass
                        out.append((name, b""))
                if not keep:
                    _check_end(tar)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise ConfigError(f"url_filter.{what}: {path}: the archive is unreadable ({e})") from None
    elif path.exists():
        raise ConfigError(f"url_filter.{what}: {path} is neither a directory nor a file ({_BLOCKLIST})")
    else:
        raise ConfigError(f"url_filter.{what}: {path} does not exist ({_BLOCKLIST})")
    if not out:
        raise ConfigError(f"url_filter.{what}: {path} holds no 'domains' or 'urls' file")
    return out


def _open_archive(path: Path, what: str) -> tarfile.TarFile:
    """``path`` as a tar archive (plain, gzip, bzip2 or xz); a file that is none is a ConfigError
    saying so, an archive cut short before its first member one saying that."""
    try:
        return tarfile.open(path, "r:*")
    except tarfile.ReadError:
        with path.open("rb") as f:
            compressed = f.read(6).startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ"))
        if compressed:  # gzip, bzip2 or xz, cut short or corrupt before the first member
            raise
        raise ConfigError(
            f"url_filter.{what}: {path} exists but is not a directory or a .tar/.tar.gz archive of "
            "UT1 lists (docs/quality.md 'URL filter')"
        ) from None


def _check_end(tar: tarfile.TarFile) -> None:
    """After the last member that ``tar`` read, only the end-of-archive zeros: tarfile ends an archive
    quietly at a header it cannot parse (a corrupt one would cut the lists short), and reading the
    compressed stream to its end checks its CRC."""
    assert tar.fileobj is not None
    tar.fileobj.seek(tar.offset)
    at = tar.offset
    while block := tar.fileobj.read(1 << 20):
        if block.count(0) != len(block):
            bad = at + len(block) - len(block.lstrip(b"\0"))
            raise tarfile.ReadError(f"a corrupt member header at byte {bad:,}: the lists would be cut short")
        at += len(block)


class UrlFilter(Filter):
    """Drops documents by their URL (datatrove's ``URLFilter``); see the module docstring."""

    name: ClassVar[str] = "url_filter"
    #: runs between the reader and extraction (the pipeline's first document step)
    before_extract: ClassVar[bool] = True

    @dataclass
    class Config:
        enabled: bool = False
        #: the metadata field holding a JSONL/Parquet record's URL (crawl archives: the record URI,
        #: ``url``, which is also read when a record lacks ``field``); dotted for a nested key
        #: (``metadata.url``)
        field: str = "url"
        #: UT1 blocklists: directories (``<category>/domains``, ``<category>/urls``) or .tar/.tar.gz of
        #: them (checked, archives read through, when the stage is built)
        blocklists: list[str] = dataclasses.field(default_factory=list)
        #: plain lists, one entry per line (``#`` starts a comment line)
        domain_lists: list[str] = dataclasses.field(default_factory=list)
        url_lists: list[str] = dataclasses.field(default_factory=list)
        #: word lists (normalised to lowercase letters and digits); ``builtin``: datatrove's, shipped
        banned_words: list[str] = dataclasses.field(default_factory=list)
        banned_subwords: list[str] = dataclasses.field(default_factory=list)
        soft_banned_words: list[str] = dataclasses.field(default_factory=list)
        #: drop when at least this many soft-banned words are in the URL (datatrove: 2)
        soft_word_threshold: int = 2
        #: a document without a URL: ``keep`` it, or ``drop`` it as ``url_missing``
        missing: str = "keep"

        def __post_init__(self) -> None:
            if self.missing not in ("keep", "drop"):
                raise ValueError(f"missing must be 'keep' or 'drop', not {self.missing!r}")
            if self.soft_word_threshold < 0:
                raise ValueError("soft_word_threshold must be >= 0")
            if not self.field or "" in self.field.split("."):
                raise ValueError(
                    f"field must name a metadata field (or a dotted path: metadata.url), not {self.field!r}"
                )

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        for what in ("blocklists", "domain_lists", "url_lists", *_WORD_LISTS):
            for p in getattr(cfg, what):
                if p != BUILTIN or what not in _WORD_LISTS:
                    self._path(p, what)  # a missing list is a config error now, not in a worker
        for p in cfg.blocklists:  # so is a blocklist that is no UT1 tree, or an unreadable archive
            _read_lists(self._path(p, "blocklists"), "blocklists", keep=False)
        self.fields = [cfg.field] if cfg.field == "url" else [cfg.field, "url"]

    @staticmethod
    def _path(p: str, what: str) -> Path:
        path = Path(p).expanduser()
        if not path.exists():
            hint = f" ({_BLOCKLIST})" if what == "blocklists" else ""
            raise ConfigError(f"url_filter.{what}: {p} does not exist{hint}")
        if what != "blocklists" and not path.is_file():
            raise ConfigError(f"url_filter.{what}: {p} is not a file")
        return path

    @classmethod
    def from_config(cls, cfg: Config) -> UrlFilter | None:
        return cls(cfg) if cfg.enabled else None

    @cached_property
    def core(self) -> Any:
        """The Rust filter with every list loaded: built once per process, on first use."""
        return build_filter(self.cfg)

    def verdicts(self, batch: pa.RecordBatch) -> np.ndarray:
        """One verdict code per document (an index into ``REASONS``): one Rust call per batch."""
        metas = batch.column("meta")
        if "." in self.cfg.field:  # a nested key: the URLs found here, judged in one call as the rest
            urls = pa.array([url_at(m, self.fields) for m in metas.to_pylist()], pa.string())
            got = self.core.judge_urls(string_buffers(urls))
        else:
            got = self.core.judge_metas(string_buffers(metas), self.fields)
        return np.frombuffer(got, dtype=np.uint8).copy()

    def _reasons(self, codes: np.ndarray) -> list[str | None]:
        if self.cfg.missing == "keep":
            codes = np.where(codes == MISSING, 0, codes)
        return [REASONS[c] for c in codes.tolist()]

    def reasons(self, batch: pa.RecordBatch) -> list[str | None]:
        return self._reasons(self.verdicts(batch))

    def run(self, batch: pa.RecordBatch, counts: StageCounts) -> pa.RecordBatch:
        codes = self.verdicts(batch)
        if missing := int((codes == MISSING).sum()):
            counts.counters["documents_without_url"] += missing
        # before extraction a web page's words are the reader's count of its HTML words
        if "raw_words" in batch.schema.names:
            words = raw_words(batch)
        else:
            batch, words = counted(batch)
        return apply_reasons(batch, self._reasons(codes), counts, words)


def url_at(meta: str | None, fields: list[str]) -> str:
    """The URL of a document's metadata (JSON): the first of ``fields`` that holds a string, a dotted
    field (``metadata.url``) looked up key by key when no top-level key has its name; "" for none (as
    ``_core``'s ``judge_metas`` reads the top-level ones)."""
    try:
        obj = json.loads(meta) if meta else None
    except ValueError:
        return ""
    if not isinstance(obj, dict):
        return ""
    for f in fields:
        value = obj.get(f)
        if value is None and "." in f:
            value = obj
            for key in f.split("."):
                value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str):
            return value
    return ""


def build_filter(cfg: UrlFilter.Config) -> Any:
    """A ``_core.UrlFilter`` with the config's lists loaded."""
    from llmpipe import _core

    f = _core.UrlFilter(
        psl_rules(shipped("public_suffix_list.dat").read_text("utf-8")), cfg.soft_word_threshold
    )
    for p in cfg.blocklists:
        for kind, data in _read_lists(UrlFilter._path(p, "blocklists"), "blocklists"):
            f.add_list(kind, data)
    for what, kind in (("domain_lists", "domains"), ("url_lists", "urls")):
        for p in getattr(cfg, what):
            f.add_list(kind, UrlFilter._path(p, what).read_bytes())
    for what in _WORD_LISTS:
        for p in getattr(cfg, what):
            path = shipped(f"{what}.txt") if p == BUILTIN else UrlFilter._path(p, what)
            f.add_list(what, path.read_bytes())
    f.finish()
    return f
