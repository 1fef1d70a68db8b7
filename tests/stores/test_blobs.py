"""Blob store: round trips, idempotence, tamper detection, crash safety, concurrent writers."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxledger.schemas.errors import BlobMissingError, DigestMismatchError, VoxledgerError
from voxledger.stores.blobs import LocalBlobStore


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.binary(max_size=5000))
def test_get_put_round_trip(tmp_path: Path, data: bytes) -> None:
    store = LocalBlobStore(tmp_path / "s")
    digest = store.put_bytes(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert store.get_bytes(digest) == data
    assert store.put_bytes(data) == digest  # idempotent


def test_layout_and_read_only_objects(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    d = store.put_bytes(b"abc")
    path = tmp_path / "objects" / "sha256" / d[:2] / d[2:]
    assert path.read_bytes() == b"abc"
    assert path.stat().st_mode & 0o222 == 0


def test_put_file_streams_and_matches(tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    store = LocalBlobStore(tmp_path / "s")
    d = store.put_file(src)
    assert d == hashlib.sha256(src.read_bytes()).hexdigest()
    with pytest.raises(DigestMismatchError, match="changed while being stored"):
        store.put_file(src, expected_sha256="0" * 64)


def _tamper(store: LocalBlobStore, digest: str, data: bytes) -> None:
    path = store.path_of(digest)
    path.chmod(0o644)
    path.write_bytes(data)


def test_tampered_object_is_detected_on_read_and_verify(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    d = store.put_bytes(b"original bytes")
    _tamper(store, d, b"evil bytes")
    bad = hashlib.sha256(b"evil bytes").hexdigest()
    with pytest.raises(DigestMismatchError) as exc:
        store.get_bytes(d)
    assert d in str(exc.value) and bad in str(exc.value)
    with pytest.raises(DigestMismatchError, match=bad):
        store.verify(d)
    # re-putting the original bytes never accepts the corrupt object: they replace it, and the
    # damaged copy is kept in quarantine as evidence
    assert store.put_bytes(b"original bytes") == d
    store.verify(d)
    assert [q.read_bytes() for q in (tmp_path / "quarantine").iterdir()] == [b"evil bytes"]


def test_a_rewrite_is_caught_even_right_after_a_verified_check(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    d = store.put_bytes(b"x" * 1000)
    assert store.intact(d)
    _tamper(store, d, b"y" * 1000)  # same size: the remembered stamp (inode, size, mtime) no longer matches
    assert not store.intact(d)


def test_missing_and_malformed_digests(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    with pytest.raises(BlobMissingError, match="a" * 64):
        store.open("a" * 64)
    with pytest.raises(VoxledgerError, match="64 lower-case hex"):
        store.has("../../etc/passwd")


def test_export_refuses_overwrite(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "s")
    d = store.put_bytes(b"x")
    dest = tmp_path / "out"
    store.export(d, dest)
    assert dest.read_bytes() == b"x"
    with pytest.raises(VoxledgerError, match="nothing overwritten"):
        store.export(d, dest)


WRITER = """
import sys
from pathlib import Path
from voxledger.stores.blobs import LocalBlobStore
store = LocalBlobStore(Path(sys.argv[1]))
print("ready", flush=True)
while True:
    store.put_file(Path(sys.argv[2]))
    # a fresh object every round so the kill can land mid-copy of a new object
    src = Path(sys.argv[2]); data = src.read_bytes(); src.write_bytes(data[:-8] + __import__("os").urandom(8))
"""


def test_sigkill_mid_write_leaves_no_partial_object(tmp_path: Path) -> None:
    root = tmp_path / "s"
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(8 * 1024 * 1024))
    rng = random.Random(7)
    for _ in range(15):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(src)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = LocalBlobStore(root)
    digests = list(store.iter_digests())
    assert digests, "the writer never finished one object in 15 runs: the test proves nothing"
    for d in digests:
        store.verify(d)  # every visible object is complete and correct


CONCURRENT = """
import sys
from pathlib import Path
from voxledger.stores.blobs import LocalBlobStore
store = LocalBlobStore(Path(sys.argv[1]))
me = int(sys.argv[2])
for i in range(200):
    store.put_bytes(b"shared-%d" % i)
    store.put_bytes(b"own-%d-%d" % (me, i))
"""


def test_four_processes_put_same_and_different_objects(tmp_path: Path) -> None:
    root = tmp_path / "s"
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(root), str(k)]) for k in range(4)]
    assert [p.wait() for p in procs] == [0, 0, 0, 0]
    store = LocalBlobStore(root)
    digests = set(store.iter_digests())
    assert len(digests) == 200 + 4 * 200
    for d in digests:
        store.verify(d)


def test_deferred_sync_makes_one_durability_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.stores import blobs as blobs_module
    from voxledger.stores.blobs import LocalBlobStore

    store = LocalBlobStore(tmp_path / "store")
    fsyncs: list[int] = []
    syncs: list[Path] = []
    real_fsync = os.fsync
    monkeypatch.setattr(blobs_module.os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(blobs_module, "_syncfs", lambda path: (syncs.append(path), True)[1])
    with store.deferred_sync():
        with store.deferred_sync():  # nested: joins the outer block
            digests = [store.put_bytes(b"obj-%d" % i) for i in range(20)]
        assert fsyncs == [] and syncs == []  # nothing synced one by one, nothing yet at all
    assert syncs == [store.root] and fsyncs == []  # one syncfs for all twenty
    assert all(store.intact(d) for d in digests)
    # without syncfs (not Linux): every object and directory is fsynced at the end instead
    monkeypatch.setattr(blobs_module, "_syncfs", lambda path: False)
    with store.deferred_sync():
        more = [store.put_bytes(b"more-%d" % i) for i in range(3)]
        assert fsyncs == []
    assert len(fsyncs) >= 3 and all(store.intact(d) for d in more)
    # a block that fails syncs nothing, yet every object it linked is whole (written before linking)
    fsyncs.clear()
    with pytest.raises(RuntimeError), store.deferred_sync():
        late = store.put_bytes(b"late")
        raise RuntimeError("stage failed")
    assert fsyncs == [] and store.intact(late)
    # outside any block each put is durable on its own, as before
    store.put_bytes(b"single")
    assert len(fsyncs) == 2  # the file, then its directory


def test_a_later_process_trusts_only_settled_unchanged_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.stores import blobs
    from voxledger.stores.hashing import SETTLE_NS, StatCache

    cache = StatCache(tmp_path / "verified.sqlite")
    writer = LocalBlobStore(tmp_path / "s", verified=cache)
    digests = [writer.put_bytes(os.urandom(2000)) for _ in range(20)]
    time.sleep(2 * SETTLE_NS / 1e9)
    hashed: list[int] = []
    real = blobs.sha256_stream
    monkeypatch.setattr(blobs, "sha256_stream", lambda f, *a: hashed.append(1) or real(f, *a))
    assert LocalBlobStore(tmp_path / "s", verified=cache).damaged(digests) == []  # a new process: hashes all, once
    assert len(hashed) == 20
    hashed.clear()
    later = LocalBlobStore(tmp_path / "s", verified=cache)
    assert later.damaged(digests) == [] and hashed == []  # settled and unchanged: a stat and a lookup each
    _tamper(later, digests[4], os.urandom(2000))  # same size, new bytes: ctime moves, so it is hashed and caught
    assert LocalBlobStore(tmp_path / "s", verified=cache).damaged(digests) == [digests[4]]
    assert hashed == [1]


def test_put_many_bytes_keeps_order_syncs_once_and_heals_a_damaged_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.stores import blobs as blobs_module

    store = LocalBlobStore(tmp_path / "store")
    old = store.put_bytes(b"already here")
    _tamper(store, old, b"tampered")  # the same name, other bytes: must be replaced, never trusted
    datas = [b"obj-%d" % i for i in range(30)] + [b"already here", b"obj-3"]  # a duplicate, too
    syncs: list[Path] = []
    monkeypatch.setattr(blobs_module, "_syncfs", lambda path: (syncs.append(path), True)[1])
    digests = store.put_many_bytes(datas)
    assert digests == [hashlib.sha256(d).hexdigest() for d in datas]
    assert syncs == [store.root]  # one durability point for the whole batch
    assert all(store.get_bytes(d) == data for d, data in zip(digests, datas, strict=True))
    assert [q.read_bytes() for q in (store.root / "quarantine").iterdir()] == [b"tampered"]
    # everything present and intact: nothing written, nothing synced
    syncs.clear()
    assert store.put_many_bytes(datas) == digests and syncs == []
