"""Downloads through a fault proxy that cuts response bodies short: every object still arrives,
resumed from the byte it broke off at (ranged GETs), verified, with no "unexpected" error.

The proxy sits between boto3 and the moto S3 server of ``test_s3.py``: it forwards every request
and, for object GETs the fault policy picks, sends the full Content-Length header but only part of
the body, then closes the connection (what a dropped connection or a broken middlebox does).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.stores.test_s3 import client, endpoint  # noqa: F401  (session fixtures: the moto server)
from voxledger.schemas.errors import VoxledgerError
from voxledger.stores import s3
from voxledger.stores.home import Home
from voxledger.stores.s3 import MAX_RESUMES, MIB, S3BlobStore, S3Config
from voxledger.stores.sync import ingest_from, push_to

Policy = Callable[[str, dict[str, str]], float | None]
"""(path, request headers) -> fraction of the body to send before cutting, or None to send it all."""


class FaultProxy:
    """A forwarding HTTP proxy whose ``policy`` decides which object GETs to cut short."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlparse(upstream)
        self.policy: Policy = lambda path, headers: None
        self.object_gets: list[tuple[str, str | None, bool]] = []  # (path, Range header, cut)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                up = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                up.request(self.command, self.path, body=body, headers=headers)
                resp = up.getresponse()
                data = resp.read()
                up.close()
                cut = None
                if self.command == "GET" and "/objects/" in self.path and resp.status in (200, 206):
                    cut = proxy.policy(self.path, dict(self.headers.items()))
                    proxy.object_gets.append((self.path, self.headers.get("Range"), cut is not None))
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "server", "date"):
                        self.send_header(k, v)
                self.end_headers()
                if self.command == "HEAD":
                    return
                if cut is None:
                    self.wfile.write(data)
                    return
                self.wfile.write(data[: int(len(data) * cut)])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(endpoint: str) -> Iterator[FaultProxy]:  # noqa: F811
    p = FaultProxy(endpoint)
    yield p
    p.close()


@pytest.fixture
def stores(proxy: FaultProxy, client: object) -> tuple[S3BlobStore, S3BlobStore]:  # noqa: F811
    """(direct store, the same bucket through the fault proxy)."""
    bucket = f"vox-{uuid.uuid4().hex[:12]}"
    direct = S3BlobStore(S3Config(bucket=bucket, endpoint_url=proxy.upstream.geturl(), prefix="team"), client=client)
    direct.client.create_bucket(Bucket=bucket)
    faulty = S3BlobStore(S3Config(bucket=bucket, endpoint_url=proxy.url, prefix="team"))
    return direct, faulty


def test_a_truncated_download_resumes_where_it_broke_off(stores: tuple[S3BlobStore, S3BlobStore], proxy: FaultProxy) -> None:
    direct, faulty = stores
    data = os.urandom(3 * MIB + 12345)
    sha = direct.put_bytes(data)
    proxy.policy = lambda path, headers: 0.4 if "Range" not in headers else None  # every first attempt is cut at 40%
    assert faulty.get_bytes(sha) == data
    gets = [g for g in proxy.object_gets if sha[2:] in g[0]]
    assert [(rng is None, cut) for _, rng, cut in gets] == [(True, True), (False, False)]
    start = int(gets[1][1].removeprefix("bytes=").split("-")[0])  # type: ignore[union-attr]
    assert 0 < start <= int(len(data) * 0.4)  # progress kept: the resume asked only for the rest


def test_a_pull_through_5_percent_truncations_completes(stores: tuple[S3BlobStore, S3BlobStore], proxy: FaultProxy, tmp_path: Path) -> None:
    direct, faulty = stores
    source = Home(tmp_path / "a")
    files = tmp_path / "files"
    files.mkdir()
    for i in range(40):
        (files / f"f{i}.bin").write_bytes(os.urandom(20_000 + i))
    from tests.factories import ingest_receipt
    from voxledger.stores.trees import TREE_MEDIA_TYPE, put_tree

    tree, _ = put_tree(source.blobs, files)
    receipt = ingest_receipt(1, out=tree)
    source.record(
        receipt.model_copy(
            update={
                "subjects": (
                    receipt.subjects[0].model_copy(update={"media_type": TREE_MEDIA_TYPE, "size_bytes": source.blobs.size_of(tree)}),
                )
            }
        )
    )
    push_to(source, direct)
    counter = iter(range(10**6))
    proxy.policy = lambda path, headers: 0.5 if next(counter) % 20 == 7 else None  # 1 object GET in 20 cut short
    target = Home(tmp_path / "b")
    report = ingest_from(faulty, target)
    assert report.receipts_copied == 1 and not report.missing_blobs
    assert sorted(target.blobs.iter_digests()) == sorted(source.blobs.iter_digests())
    assert sum(cut for _, _, cut in proxy.object_gets) >= 2  # faults really happened, and were resumed
    for d in target.blobs.iter_digests():
        target.blobs.verify(d)


def test_a_download_that_keeps_breaking_fails_in_one_clean_line(
    stores: tuple[S3BlobStore, S3BlobStore], proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct, faulty = stores
    monkeypatch.setattr(s3, "RESUME_BACKOFF_S", (0.001, 0.01))  # the same nine attempts, without the 9.1 s of waits between them
    sha = direct.put_bytes(b"x" * 100_000)
    proxy.policy = lambda path, headers: 0.1  # every attempt cut
    with pytest.raises(VoxledgerError, match=f"broke off {MAX_RESUMES + 1} times") as info:
        faulty.get_bytes(sha)
    assert "\n" not in str(info.value)
    assert hashlib.sha256(direct.get_bytes(sha)).hexdigest() == sha
