"""A real S3-compatible server for tests: moto's server mode on a free port of 127.0.0.1 (its HTTP API,
reached through botocore/s3fs like any S3 endpoint), with one bucket, empty at start."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from procs import free_port


@dataclass
class S3Server:
    env: dict[str, str]  # what points a client at the server: endpoint, credentials, region
    client: Any  # a boto3 S3 client for the test's own uploads and listings
    bucket: str

    def upload_tree(self, local: Path, prefix: str) -> None:
        for p in sorted(x for x in local.rglob("*") if x.is_file()):
            self.client.upload_file(str(p), self.bucket, f"{prefix}/{p.relative_to(local).as_posix()}")

    def download_tree(self, prefix: str, dest: Path) -> Path:
        dest.mkdir(parents=True)
        for key in self.keys(prefix):
            (dest / key[len(prefix) + 1 :]).parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(self.bucket, key, str(dest / key[len(prefix) + 1 :]))
        return dest

    def listing(self, prefix: str) -> dict[str, Any]:
        """Key -> (ETag, LastModified) of every object under ``prefix/``."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix + "/")
        return {o["Key"]: (o["ETag"], o["LastModified"]) for page in pages for o in page.get("Contents", [])}

    def keys(self, prefix: str) -> list[str]:
        return sorted(self.listing(prefix))


@contextmanager
def s3_server(bucket: str = "llmpipe-test") -> Iterator[S3Server]:
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        # moto keeps one store per process: a server started after another in the same test process
        # would see its buckets and objects (CI: test_ray's inputs showed up in test_s3's listing)
        reset = urllib.request.Request(f"{env['AWS_ENDPOINT_URL']}/moto-api/reset", method="POST")
        urllib.request.urlopen(reset, timeout=30).close()
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=bucket)
        yield S3Server(env, client, bucket)
    finally:
        server.stop()
