"""``sync``: push and pull of receipts with blobs against a local S3 server (moto, its own process
on 127.0.0.1, fake credentials), first pass and no-change pass: requests sent and seconds, against
a boto3 transfer manager copying the same objects up and down in the same run.

moto is a test dependency, not a runtime one; without it the section says so and measures nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from voxledger.bench_sections.common import Figure
from voxledger.schemas.errors import VoxledgerError

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
BLOB_BYTES = 4096


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server in a child process on a free port of 127.0.0.1; its endpoint URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **FAKE_AWS})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
                break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise VoxledgerError(f"moto server on {url} did not start ({exc}); run {' '.join(cmd)} by hand to see why") from exc
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def _fake_credentials() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in FAKE_AWS}
    os.environ.update(FAKE_AWS)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _store(endpoint: str, bucket: str) -> tuple[Any, list[int]]:
    """A store in a new bucket and a one-element request counter (HTTP sends, retries included)."""
    from voxledger.stores.s3 import S3BlobStore, S3Config

    store = S3BlobStore(S3Config(bucket=bucket, endpoint_url=endpoint, prefix="team"))
    store.client.create_bucket(Bucket=bucket)
    sent = [0]

    def count(**_: Any) -> None:
        sent[0] += 1

    store.client.meta.events.register("before-send.s3", count)
    return store, sent


def _populate(root: Path, n: int) -> Any:
    """A home holding ``n`` ingest receipts, each naming its own random blob."""
    from datetime import UTC, datetime

    from voxledger.schemas.base import Artifact, Producer, ReceiptBase
    from voxledger.schemas.core import IngestParameters, IngestReceipt
    from voxledger.stores.home import Home
    from voxledger.stores.identity import environment

    home = Home(root)
    env, t0 = environment(), datetime(2026, 1, 1, tzinfo=UTC)
    for start in range(0, n, 1000):
        batch: list[ReceiptBase] = []
        for i in range(start, min(n, start + 1000)):
            blob = home.blobs.put_bytes(os.urandom(BLOB_BYTES))
            batch.append(
                IngestReceipt(
                    producer=Producer(flow="bench", task="sync"),
                    environment=env,
                    started_at=t0,
                    finished_at=t0,
                    subjects=(Artifact(role="file", sha256=blob, size_bytes=BLOB_BYTES, media_type="application/octet-stream"),),
                    parameters=IngestParameters(source="bytes", name=f"x{i}", file_count=1, total_bytes=BLOB_BYTES),
                )
            )
        home.record_many(batch)
    return home


def _measure(fn: Callable[[], Any], sent: list[int]) -> tuple[float, int]:
    before = sent[0]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0, sent[0] - before


def _transfer_manager(endpoint: str, home: Any, work: Path) -> tuple[float, float]:
    """(upload s, download s) of the same objects with boto3's transfer manager, 16 threads."""
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    store, _ = _store(endpoint, "bench-baseline")
    digests = list(home.blobs.iter_digests())
    config = TransferConfig(max_concurrency=store.config.max_workers)
    t0 = time.perf_counter()
    with create_transfer_manager(store.client, config) as tm:
        for d in digests:
            tm.upload(str(home.blobs.path_of(d)), store.config.bucket, store.key_of(d))
    t_up = time.perf_counter() - t0
    out = work / "baseline-down"
    out.mkdir()
    t0 = time.perf_counter()
    with create_transfer_manager(store.client, config) as tm:
        for d in digests:
            tm.download(store.config.bucket, store.key_of(d), str(out / d))
    return t_up, time.perf_counter() - t0


def bench_sync(work: Path, n: int) -> list[Figure]:
    """Push ``n`` receipts (and ``n`` blobs) from one home, pull them into another, then again unchanged."""
    try:
        import moto  # noqa: F401
    except ImportError:
        return [Figure("sync: not measured (needs moto: pip install 'moto[server]==5.2.5')", 0.0, "")]
    from voxledger.stores.home import Home
    from voxledger.stores.sync import ingest_from, push_to

    a = _populate(work / "sync-a", n)
    b = Home(work / "sync-b")
    with _fake_credentials(), moto_server() as endpoint:
        store, sent = _store(endpoint, "bench-sync")
        push1 = _measure(lambda: push_to(a, store), sent)
        push2 = _measure(lambda: push_to(a, store), sent)
        pull1 = _measure(lambda: ingest_from(store, b), sent)
        pull2 = _measure(lambda: ingest_from(store, b), sent)
        if sorted(b.receipts.ids()) != sorted(a.receipts.ids()):
            raise VoxledgerError(f"bench sync: the pulled home lists {len(list(b.receipts.ids()))} receipts, expected {n}")
        t_up, t_down = _transfer_manager(endpoint, a, work)
    shutil.rmtree(work / "baseline-down", ignore_errors=True)
    objects = f"{n:,} receipts + {n:,} blobs"
    return [
        Figure(f"push {objects}, first pass", push1[0], "s", f"{push1[1]:,} requests"),
        Figure(f"push {objects}, no change", push2[0], "s", f"{push2[1]:,} requests"),
        Figure(f"pull {objects}, first pass", pull1[0], "s", f"{pull1[1]:,} requests"),
        Figure(f"pull {objects}, no change: requests", pull2[1], "requests", "<= 5"),
        Figure(f"pull {objects}, no change", pull2[0], "s"),
        Figure(f"transfer manager upload of the same {2 * n:,} objects", t_up, "s"),
        Figure(f"transfer manager download of the same {2 * n:,} objects", t_down, "s"),
        Figure("push first pass / transfer manager upload", push1[0] / t_up, "x", "<= 3"),
        Figure("pull first pass / transfer manager download", pull1[0] / t_down, "x", "<= 3"),
    ]
