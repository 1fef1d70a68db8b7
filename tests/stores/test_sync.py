"""Sync cost scales with what changed: requests counted on the client against a moto server on 127.0.0.1."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.factories import ingest_receipt
from tests.stores import test_s3
from voxledger.schemas.errors import DigestMismatchError
from voxledger.stores import s3 as s3_module
from voxledger.stores.home import Home
from voxledger.stores.s3 import S3BlobStore
from voxledger.stores.sync import CLOCK_SKEW_S, SyncState, ingest_from, push_to

endpoint, client, make_store = test_s3.endpoint, test_s3.client, test_s3.make_store  # one moto server for both modules' tests


@pytest.fixture
def bucket(make_store: Any) -> S3BlobStore:
    """An empty shared store in a fresh bucket."""
    return make_store()  # type: ignore[no-any-return]


@contextmanager
def counted(store: S3BlobStore) -> Iterator[Counter[str]]:
    """Count the HTTP requests the store's client sends, by operation."""
    calls: Counter[str] = Counter()

    def hook(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    store.client.meta.events.register("before-call.s3", hook)
    try:
        yield calls
    finally:
        store.client.meta.events.unregister("before-call.s3", hook)


def _record(home: Home, start: int, n: int) -> list[str]:
    """n receipts, each with its own blob (numbered from ``start`` so homes do not collide)."""
    return home.record_many([ingest_receipt(i, out=home.blobs.put_bytes(b"blob-%d" % i)) for i in range(start, start + n)])


def test_pull_of_an_unchanged_bucket_is_one_request_and_new_receipts_cost_o_n(bucket: S3BlobStore, tmp_path: Path) -> None:
    a, b = Home(tmp_path / "a"), Home(tmp_path / "b")
    _record(a, 1, 30)
    push_to(a, bucket)
    first = ingest_from(bucket, b)
    assert (first.receipts_copied, first.blobs_copied, first.catalog_rows_new) == (30, 30, 30)
    with counted(bucket) as calls:
        again = ingest_from(bucket, b)
    assert sum(calls.values()) == 1 and calls["ListObjectsV2"] == 1
    assert (again.receipts_seen, again.receipts_copied, again.catalog_rows_new) == (0, 0, 0)
    _record(a, 100, 5)
    push_to(a, bucket)
    with counted(bucket) as calls:
        more = ingest_from(bucket, b)
    # one listing, one segment, then a GET per new receipt and per new blob: nothing per old receipt
    assert dict(calls) == {"ListObjectsV2": 1, "GetObject": 1 + 5 + 5}
    assert (more.segments_read, more.receipts_copied, more.blobs_copied, more.catalog_rows_new) == (1, 5, 5, 5)
    assert sorted(b.receipts.ids()) == sorted(a.receipts.ids())


def test_push_sends_only_what_the_bucket_lacks(bucket: S3BlobStore, tmp_path: Path) -> None:
    a = Home(tmp_path / "a")
    _record(a, 1, 20)
    with counted(bucket) as calls:
        first = push_to(a, bucket)
    assert (first.receipts_copied, first.blobs_copied) == (20, 20)
    assert calls["HeadObject"] == 0 and calls["ListObjectsV2"] == 1  # one listing answers all 40 digests
    with counted(bucket) as calls:
        again = push_to(a, bucket)
    assert sum(calls.values()) == 0 and again.receipts_copied == 0
    # a second home holding the same receipts (say, restored from a backup) uploads no object again
    twin = Home(tmp_path / "twin")
    _record(twin, 1, 20)
    with counted(bucket) as calls:
        twin_push = push_to(twin, bucket)
    assert (twin_push.receipts_copied, twin_push.blobs_copied) == (0, 0)
    assert calls["HeadObject"] == 0 and calls["ListObjectsV2"] == 1
    assert calls["PutObject"] == 20 + 1  # markers (create-only, answered 412) and one journal segment


def test_existing_jumps_over_the_key_space(bucket: S3BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    present = [bucket.put_bytes(b"k-%d" % i) for i in range(12)]
    absent = [f"{i:064x}" for i in range(1, 6)]
    monkeypatch.setattr(s3_module, "LIST_PAGE_KEYS", 3)  # small pages force jumps and truncation
    assert bucket.existing([*present, *absent]) == set(present)
    assert bucket.existing(present[:1]) == set(present[:1])
    assert bucket.existing([]) == set()


def test_pull_sees_segments_written_with_a_lagging_clock_and_by_homes_that_never_pulled(bucket: S3BlobStore, tmp_path: Path) -> None:
    a, b, c = Home(tmp_path / "a"), Home(tmp_path / "b"), Home(tmp_path / "c")
    _record(a, 1, 3)
    push_to(a, bucket)
    ingest_from(bucket, b)
    # c's clock runs 10 minutes slow: its segment sorts before b's cursor, yet within the skew window
    rid = _record(c, 50, 1)[0]
    push_to(c, bucket)
    late = bucket.append_journal([rid], now_ns=time.time_ns() - (CLOCK_SKEW_S - 300) * 10**9)
    got = ingest_from(bucket, b)
    assert rid in set(b.receipts.ids()) and got.receipts_copied == 1
    assert late in SyncState(b, bucket).applied([late])
    # a's own push never moves a's cursor past segments it has not read
    _record(b, 80, 2)
    push_to(b, bucket)
    push_to(a, bucket)
    ingest_from(bucket, a)
    assert set(a.receipts.ids()) == set(b.receipts.ids())


def test_full_pull_finds_receipts_listed_only_by_markers(bucket: S3BlobStore, tmp_path: Path) -> None:
    a, b = Home(tmp_path / "a"), Home(tmp_path / "b")
    for rid in _record(a, 1, 4):  # as pushed before the journal existed: objects and markers only
        bucket.put_bytes(a.blobs.get_bytes(a.receipts.read_document(rid)["subjects"][0]["sha256"]))
        bucket.put_bytes(a.blobs.get_bytes(rid))
        bucket.mark_receipt(rid)
    assert ingest_from(bucket, b).receipts_copied == 4  # the first pull lists markers
    late = _record(a, 10, 1)[0]
    bucket.put_bytes(a.blobs.get_bytes(late))  # a marker-only receipt after b's first pull (blob left out)
    bucket.mark_receipt(late)
    again = ingest_from(bucket, b)  # no journal segment has been listed yet, so pulls keep listing markers
    assert again.receipts_copied == 1 and len(again.missing_blobs) == 1
    assert ingest_from(bucket, b, full=True).receipts_copied == 0


def test_a_tampered_journal_segment_is_refused(bucket: S3BlobStore, tmp_path: Path) -> None:
    a, b = Home(tmp_path / "a"), Home(tmp_path / "b")
    _record(a, 1, 1)
    push_to(a, bucket)
    ingest_from(bucket, b)
    _record(a, 5, 1)
    push_to(a, bucket)
    name = bucket.journal_after()[-1]
    bucket.client.put_object(Bucket=bucket.config.bucket, Key=bucket.config.prefix + name, Body=b'{"receipts": []}')
    with pytest.raises(DigestMismatchError, match=name.rpartition("-")[2]):
        ingest_from(bucket, b)


def test_parallel_transfers_copy_many_blobs(bucket: S3BlobStore, tmp_path: Path) -> None:
    store = S3BlobStore(replace(bucket.config, max_workers=4), client=bucket.client)
    a, b = Home(tmp_path / "a"), Home(tmp_path / "b")
    _record(a, 1, 60)
    assert push_to(a, store).blobs_copied == 60
    got = ingest_from(store, b)
    assert (got.receipts_copied, got.blobs_copied) == (60, 60)
    assert sorted(b.blobs.iter_digests()) == sorted(a.blobs.iter_digests())


@pytest.mark.slow  # 15-75 s: a moto server process starts, and the baseline copies everything again
def test_bench_sync_quick_meets_its_request_goals(tmp_path: Path) -> None:
    """``voxledger bench --only sync`` at a smoke size: a moto server process of its own, every figure present."""
    from voxledger.bench_sections.sync import bench_sync

    figures = {f.name: f for f in bench_sync(tmp_path, 20)}
    assert len(figures) == 9
    assert figures["push 20 receipts + 20 blobs, no change"].goal == "0 requests"
    assert figures["pull 20 receipts + 20 blobs, no change: requests"].value <= 5


def _publish(bucket: S3BlobStore, home: Home, rid: str, now_ns: int) -> str:
    """Push one receipt as a writer whose clock reads ``now_ns`` does: objects, marker, then its journal segment."""
    for subject in home.receipts.read_document(rid)["subjects"]:
        bucket.put_bytes(home.blobs.get_bytes(subject["sha256"]))
    bucket.put_bytes(home.blobs.get_bytes(rid))
    bucket.mark_receipt(rid)
    return bucket.append_journal([rid], now_ns=now_ns)


def test_a_writer_hours_ahead_or_behind_hides_no_segment_and_is_named(bucket: S3BlobStore, tmp_path: Path) -> None:
    """A segment stamped 2 h ahead moved the reader's cursor past every honest segment after it, and one stamped
    2 h behind sorted before the cursor: incremental pulls never saw them. Pulls list the journal, not a window."""
    a, b, other = Home(tmp_path / "a"), Home(tmp_path / "b"), Home(tmp_path / "other")
    _record(a, 1, 1)
    push_to(a, bucket)
    ingest_from(bucket, b)
    fast = _record(other, 20, 1)[0]
    future = _publish(bucket, other, fast, time.time_ns() + 2 * 3600 * 10**9)
    got = ingest_from(bucket, b)
    assert fast in set(b.receipts.ids()) and got.clock_skew == [future]
    honest = _record(a, 40, 1)[0]
    push_to(a, bucket)
    slow = _record(other, 60, 1)[0]
    _publish(bucket, other, slow, time.time_ns() - 2 * 3600 * 10**9)
    assert ingest_from(bucket, b).clock_skew == []
    assert {honest, slow} <= set(b.receipts.ids())
