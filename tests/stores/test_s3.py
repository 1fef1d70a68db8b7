"""S3 blob store against a real S3 server (moto, server mode, on 127.0.0.1 with fake credentials).

Round trips, tamper detection, no overwrite, concurrent writers in separate processes, multipart
uploads, and a catalog rebuilt on another machine's home from the shared store alone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import ingest_receipt
from voxledger.schemas.base import Artifact, InputRef
from voxledger.schemas.errors import (
    BlobMissingError,
    DigestMismatchError,
    ReceiptError,
    SettingsError,
    VoxledgerError,
)
from voxledger.stores.home import Home
from voxledger.stores.s3 import MIB, S3BlobStore, S3Config
from voxledger.stores.sync import ingest_from, push_to
from voxledger.stores.trees import TREE_MEDIA_TYPE, put_tree

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="session")
def endpoint() -> Iterator[str]:
    """A moto S3 server on a free port of 127.0.0.1 for the whole session."""
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    with pytest.MonkeyPatch.context() as mp:
        for k, v in FAKE_ENV.items():
            mp.setenv(k, v)
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture(scope="session")
def client(endpoint: str) -> object:
    """One boto3 client for the session (building a client costs ~0.3 s)."""
    return S3BlobStore(S3Config(bucket="unused", endpoint_url=endpoint)).client


@pytest.fixture
def make_store(endpoint: str, client: object) -> object:
    """Factory: a store in a fresh, empty bucket (prefix ``team/``), with config overrides."""

    def make(**kw: object) -> S3BlobStore:
        cfg = S3Config(bucket=f"vox-{uuid.uuid4().hex[:12]}", endpoint_url=endpoint, prefix="team", **kw)  # type: ignore[arg-type]
        store = S3BlobStore(cfg, client=client)
        store.client.create_bucket(Bucket=cfg.bucket)
        return store

    return make


@pytest.fixture
def remote(make_store) -> S3BlobStore:  # type: ignore[no-untyped-def]
    """An empty shared store in a fresh bucket."""
    return make_store()  # type: ignore[no-any-return]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.binary(max_size=5000))
def test_get_put_round_trip(remote: S3BlobStore, data: bytes) -> None:
    digest = remote.put_bytes(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert remote.get_bytes(digest) == data
    assert remote.put_bytes(data) == digest  # idempotent
    assert remote.size_of(digest) == len(data)


def test_layout_listing_and_export(remote: S3BlobStore, tmp_path: Path) -> None:
    d = remote.put_bytes(b"abc")
    got = remote.client.get_object(Bucket=remote.config.bucket, Key=f"team/objects/sha256/{d[:2]}/{d[2:]}")
    assert got["Body"].read() == b"abc"
    e = remote.put_bytes(b"def")
    assert sorted(remote.iter_digests()) == sorted([d, e])
    remote.export(d, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == b"abc"
    with pytest.raises(VoxledgerError, match="nothing overwritten"):
        remote.export(d, tmp_path / "out")
    remote.mark_receipt(e)
    remote.mark_receipt(e)
    assert remote.receipt_ids() == [e]


def _tamper(remote: S3BlobStore, digest: str, data: bytes) -> None:
    remote.client.put_object(Bucket=remote.config.bucket, Key=remote.key_of(digest), Body=data)


def test_tampered_object_is_detected_on_read_verify_and_reput(remote: S3BlobStore) -> None:
    d = remote.put_bytes(b"original bytes")
    _tamper(remote, d, b"evil bytes")
    bad = hashlib.sha256(b"evil bytes").hexdigest()
    with pytest.raises(DigestMismatchError) as exc:
        remote.get_bytes(d)
    assert d in str(exc.value) and bad in str(exc.value) and remote.config.bucket in str(exc.value)
    with pytest.raises(DigestMismatchError, match=bad):
        remote.verify(d)
    with pytest.raises(DigestMismatchError):  # re-putting must not silently accept the corrupt object
        remote.put_bytes(b"original bytes")


def test_missing_and_malformed_digests(remote: S3BlobStore) -> None:
    with pytest.raises(BlobMissingError, match="a" * 64):
        remote.open("a" * 64)
    with pytest.raises(BlobMissingError):
        remote.size_of("b" * 64)
    assert not remote.has("c" * 64)
    with pytest.raises(VoxledgerError, match="64 lower-case hex"):
        remote.has("../../etc/passwd")


def test_conditional_write_refuses_overwrite(remote: S3BlobStore) -> None:
    """The server itself refuses a second create of the same key; the store then verifies."""
    d = remote.put_bytes(b"first")
    key = remote.key_of(d)
    with pytest.raises(remote.client.exceptions.ClientError, match="PreconditionFailed"):
        remote.client.put_object(Bucket=remote.config.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert remote.get_bytes(d) == b"first"
    # a writer that lost the race (its has() said no) verifies instead of rewriting
    assert remote._commit(d, lambda extra: remote._call("put_object", Key=key, Body=b"x", **extra)) is False
    assert remote.get_bytes(d) == b"first"


def test_check_then_put_mode_round_trips_and_detects_tamper(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(conditional_writes=False)
    d = store.put_bytes(b"plain put")
    assert store.get_bytes(d) == b"plain put"
    _tamper(store, d, b"other")
    with pytest.raises(DigestMismatchError):
        store.put_bytes(b"plain put")


class _NoConditionalWrites:
    """The real client, except that create-only writes are answered 501 as by older servers."""

    def __init__(self, real: object) -> None:
        self._real = real
        self.refused = 0

    def __getattr__(self, name: str) -> object:
        fn = getattr(self._real, name)

        def call(*args: object, **kw: object) -> object:
            if "IfNoneMatch" in kw:
                self.refused += 1
                raise ClientError({"Error": {"Code": "NotImplemented", "Message": "no"}}, name)
            return fn(*args, **kw)

        return call if callable(fn) else fn


def test_server_without_conditional_writes_falls_back_to_check_then_put(remote: S3BlobStore, tmp_path: Path) -> None:
    old = _NoConditionalWrites(remote.client)
    store = S3BlobStore(remote.config, client=old)
    d = store.put_bytes(b"older server")
    store.mark_receipt(d)
    assert old.refused == 1  # asked once, then remembered
    assert remote.get_bytes(d) == b"older server" and remote.receipt_ids() == [d]
    _tamper(remote, d, b"changed")
    with pytest.raises(DigestMismatchError):
        store.put_bytes(b"older server")


def test_multipart_upload_of_a_file_larger_than_the_part_size(make_store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = make_store(part_size_bytes=5 * MIB, multipart_threshold_bytes=5 * MIB)
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(11 * MIB + 17))
    d = store.put_file(src)
    assert d == hashlib.sha256(src.read_bytes()).hexdigest()
    head = store.client.head_object(Bucket=store.config.bucket, Key=store.key_of(d))
    assert head["ETag"].strip('"').endswith("-3")  # 5 + 5 + 1 MiB parts: really multipart
    store.verify(d)
    assert store.put_file(src) == d  # idempotent: existing object verified
    wrong = "0" * 64
    with pytest.raises(DigestMismatchError, match="changed while being stored"):
        store.put_file(src, expected_sha256=wrong)
    assert not store.has(wrong)
    assert not store.client.list_multipart_uploads(Bucket=store.config.bucket).get("Uploads")


CONCURRENT = """
import sys
from voxledger.stores.s3 import S3BlobStore, S3Config
store = S3BlobStore(S3Config(bucket=sys.argv[1], endpoint_url=sys.argv[2], prefix="team"))
me = int(sys.argv[3])
store.has("0" * 64)  # connect before the start line so the four really race
print("ready", flush=True)
sys.stdin.readline()
for i in range(30):
    store.put_bytes(b"shared-%d" % i)
    store.put_bytes(b"own-%d-%d" % (me, i))
"""


def test_four_processes_put_same_and_different_objects(remote: S3BlobStore, endpoint: str) -> None:
    env = {**os.environ, **FAKE_ENV}
    args = [remote.config.bucket, endpoint]
    procs = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT, *args, str(k)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for k in range(4)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.close()
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    digests = set(remote.iter_digests())
    assert len(digests) == 30 + 4 * 30
    for d in digests:
        remote.verify(d)


def _populate(home: Home, tmp_path: Path) -> list[str]:
    """Receipts with real subject blobs, a tree subject, an artifact input, and one missing blob."""
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_bytes(b"alpha")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(3000))
    tree_sha, _ = put_tree(home.blobs, tree)
    ids: list[str] = []
    prev: str | None = None
    for i in range(1, 6):
        blob = home.blobs.put_bytes(b"payload-%d" % i)
        inputs = (InputRef(role="source", sha256=prev, ref="artifact"),) if prev else ()
        ids.append(home.record(ingest_receipt(i, inputs=inputs, out=blob)))
        prev = blob
    tree_receipt = ingest_receipt(9).model_copy(
        update={"subjects": (Artifact(role="tree", sha256=tree_sha, size_bytes=home.blobs.size_of(tree_sha), media_type=TREE_MEDIA_TYPE),)}
    )
    ids.append(home.record(tree_receipt))
    rid, doc = home.receipts.write(ingest_receipt(7))  # names a digest no store holds (record() would refuse it)
    home.catalog.ingest([(rid, doc)])
    ids.append(rid)
    return ids


TABLES = ["receipts", "artifacts", "edges"]


def _dump(home: Home) -> dict[str, list[tuple]]:  # type: ignore[type-arg]
    with home.catalog.connect(read_only=True) as con:
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}


def test_push_then_ingest_rebuilds_the_same_catalog(remote: S3BlobStore, tmp_path: Path) -> None:
    a = Home(tmp_path / "machine-a")
    ids = _populate(a, tmp_path)
    pushed = push_to(a, remote)
    assert pushed.receipts_seen == len(ids) == 7
    assert [d for _, d in pushed.missing_blobs] == [f"{7:064x}"]
    assert push_to(a, remote).blobs_copied == 0  # idempotent
    assert remote.receipt_ids() == sorted(ids)

    b = Home(tmp_path / "machine-b")
    got = ingest_from(remote, b)
    assert (got.receipts_seen, got.receipts_copied, got.catalog_rows_new) == (7, 7, 7)
    assert [d for _, d in got.missing_blobs] == [f"{7:064x}"]
    assert _dump(b) == _dump(a)
    assert sorted(b.blobs.iter_digests()) == sorted(a.blobs.iter_digests())
    again = ingest_from(remote, b)
    assert (again.receipts_copied, again.blobs_copied, again.catalog_rows_new) == (0, 0, 0)
    b.catalog.path.unlink()
    assert b.rebuild_catalog() == 7
    assert _dump(b) == _dump(a)


def test_ingest_refuses_a_tampered_receipt(remote: S3BlobStore, tmp_path: Path) -> None:
    a = Home(tmp_path / "a")
    rid = a.record(ingest_receipt(3, out=a.blobs.put_bytes(b"three")))
    push_to(a, remote)
    _tamper(remote, rid, b'{"kind": "ingest"}')
    with pytest.raises(DigestMismatchError, match=rid):
        ingest_from(remote, Home(tmp_path / "b"))
    remote.mark_receipt("e" * 64)  # a marker whose receipt object was never pushed
    with pytest.raises((ReceiptError, DigestMismatchError)):
        ingest_from(remote, Home(tmp_path / "c"))


def test_config_from_env_and_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("VOXLEDGER_S3_")]:
        monkeypatch.delenv(k)
    with pytest.raises(VoxledgerError, match="VOXLEDGER_S3_BUCKET"):
        S3Config.from_env()
    for k, v in {"VOXLEDGER_S3_BUCKET": "shared", "VOXLEDGER_S3_PREFIX": "vox", "VOXLEDGER_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
                 "VOXLEDGER_S3_CONDITIONAL_WRITES": "0", "VOXLEDGER_S3_WORKERS": "4"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    cfg = S3Config.from_env()
    assert (cfg.bucket, cfg.prefix, cfg.endpoint_url, cfg.conditional_writes, cfg.max_workers) == (
        "shared", "vox/", "http://127.0.0.1:9000", False, 4)  # fmt: skip
    monkeypatch.setenv("VOXLEDGER_S3_PART_SIZE_MIB", "4")
    with pytest.raises(SettingsError, match="VOXLEDGER_S3_PART_SIZE_MIB='4' is not a whole number of at least 5"):
        S3Config.from_env()
    with pytest.raises(VoxledgerError, match="minimum"):
        S3Config(bucket="x", part_size_bytes=MIB)
