"""``--out`` on an object store (``s3://bucket/prefix``, any fsspec file system).

The run itself happens in a local staging directory (its work state, lock, completion markers and
outputs, exactly as for a local ``--out``); a finished run is then published to the store, one object
per file, each written once under its final key (an object store's PUT is atomic: a reader sees the
whole object or none). The order makes every state safe to read:

    done marker and old manifest deleted -> shards and tokenizer -> stale shards deleted
      -> quarantine, stats, report -> manifest -> done marker

so a manifest on the store never lists a missing shard, and the done marker (``.llmpipe-done.json``
with the run's fingerprint) appears only when everything is there. A re-run with the same inputs and
config finds the marker and stops; a run killed during the upload finds its finished staging
directory and uploads again. The staging directory is removed after a successful upload
(``--keep-work`` keeps it). Two runs on one machine cannot share a staging directory (its lock); runs
on two machines writing the same prefix are not prevented.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmpipe.curate.funnel import DONE, SHARD_NAME, finished_stats
from llmpipe.curate.workdir import fault_point
from llmpipe.data.format import MANIFEST
from llmpipe.errors import InputError
from llmpipe.io.fs import filesystem, store_call

#: stores whose object writes are atomic (written whole under the final name, or not at all)
ATOMIC_PUT = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory"}
#: stores where a "bucket" is the first path component and must exist before a run
BUCKETS = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"}


#: exception class names of a connection that could not be made (botocore, aiohttp, requests)
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError", "ConnectTimeout"}


def unreachable(e: BaseException) -> bool:
    """``e`` says the store's endpoint could not be reached (refused, unknown host, timed out)."""
    return isinstance(e, ConnectionError | TimeoutError) or any(
        c.__name__ in _UNREACHABLE for c in type(e).__mro__
    )


def quick_probe(fs: Any) -> Any:
    """``fs`` as a file system that tries once with a short connect timeout (s3fs), for a first check
    of the store; other file systems as they are."""
    if type(fs).__name__ != "S3FileSystem":
        return fs
    opts = dict(fs.storage_options)
    config = {**opts.get("config_kwargs", {}), "connect_timeout": 5, "retries": {"max_attempts": 1}}
    probe = type(fs)(**{**opts, "config_kwargs": config, "skip_instance_cache": True})
    probe.retries = 1
    return probe


def default_staging(url: str) -> Path:
    """A local directory kept per output URL, so a killed run resumes there."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return cache / "llmpipe" / "staging" / key


class RemoteOut:
    """One output prefix on a store: is a run finished there, and publishing a finished one."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.path = filesystem(self.url)
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple | list) else (self.fs.protocol,)
        self.atomic = bool(set(protocols) & ATOMIC_PUT)
        self.buckets = bool(set(protocols) & BUCKETS)

    def _key(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return store_call(f"--out {self.url}", what, fn)

    def check(self) -> None:
        """Fail before any work when the store cannot be reached or the bucket does not exist. One
        try with a short connect timeout: an endpoint that does not answer is said in a second or
        two, as such (``exists`` would retry for half a minute, then report a missing bucket)."""
        fs = quick_probe(self.fs)
        target = self.path.split("/", 1)[0] if self.buckets else self.path
        try:
            fs.info(target)
        except FileNotFoundError:
            if self.buckets:
                raise InputError(f"--out {self.url}: the bucket {target!r} does not exist") from None
        except Exception as e:  # noqa: BLE001 - any failure of the store, said in one line
            detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
            if unreachable(e):
                raise InputError(f"--out {self.url}: cannot reach the store's endpoint ({detail})") from None
            raise InputError(
                f"--out {self.url}: cannot reach the store ({type(e).__name__}: {detail})"
            ) from None

    def finished(self, fp: str) -> dict[str, Any] | None:
        """The stats of a finished run with fingerprint ``fp`` on the store, else None."""
        self.fs.invalidate_cache()
        try:
            done = self._call("read its done marker", lambda: self.fs.cat_file(self._key(DONE)))
        except FileNotFoundError:
            return None
        if finished_stats(done, "{}", fp) is None or not self._call(
            "list it", lambda: self.fs.exists(self._key(MANIFEST))
        ):
            return None
        stats = self._call("read stats.json", lambda: self.fs.cat_file(self._key("stats.json")))
        return finished_stats(done, stats, fp)

    def publish(self, local: Path, log: Callable[[str], None]) -> None:
        """Upload the finished run in ``local`` (its outputs and done marker), the manifest and marker last."""
        manifest = json.loads((local / MANIFEST).read_text())
        shards = sorted(e["file"] for split in manifest["splits"].values() for e in split["shards"])
        rest = sorted(
            p.name
            for p in local.iterdir()
            if p.is_file() and not p.name.startswith(".") and p.name not in {MANIFEST, *shards}
        )
        for name in (DONE, MANIFEST):  # nothing on the store claims completeness from here on
            self._delete(self._key(name))
        for name in shards:
            self._put(local / name, name)
            fault_point(f"uploaded {name}")
        existing = self._call(
            "list it", lambda: self.fs.ls(self.path, detail=False) if self.fs.exists(self.path) else []
        )
        for key in existing:
            base = key.rstrip("/").rsplit("/", 1)[-1]
            if SHARD_NAME.fullmatch(base) and base not in shards:
                self._delete(key)
        for name in rest:
            self._put(local / name, name)
        self._put(local / MANIFEST, MANIFEST)
        self._put(local / DONE, DONE)
        log(f"curate: uploaded {len(shards)} shard(s) and {len(rest) + 1} other file(s) -> {self.url}")

    def _delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._call("delete an old output", lambda: self.fs.rm_file(key))

    def _put(self, src: Path, name: str) -> None:
        key = self._key(name)
        if self.atomic:
            self._call(f"upload {name}", lambda: self.fs.put_file(str(src), key))
        else:  # a file system without atomic writes: a temporary name, then a rename
            tmp = self._key(f".{name}.tmp")
            self._call(f"upload {name}", lambda: self.fs.put_file(str(src), tmp))
            self._call(f"rename {name}", lambda: self.fs.mv(tmp, key))


def remove_staging(local: Path) -> None:
    shutil.rmtree(local, ignore_errors=True)
