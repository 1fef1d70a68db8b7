"""Receipts pulled from the shared store are re-checked in full before they are indexed
(``VOXLEDGER_PULLED_RECEIPTS=recheck``, the default): a forged but well-formed receipt pushed by
another writer is refused, named in one line, and not indexed. Real S3 (moto on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.factories import ingest_receipt
from tests.stores import test_s3
from voxledger.schemas.base import utc_now
from voxledger.schemas.promotion import ChallengerDecision, PromotionParameters, PromotionReceipt, PromotionResult, RuleValue
from voxledger.stores.home import Home
from voxledger.stores.s3 import S3BlobStore
from voxledger.stores.sync import ingest_from, push_to
from voxledger.tasks.receipting import build_receipt

endpoint, client, make_store = test_s3.endpoint, test_s3.client, test_s3.make_store  # one moto server for the session


def _forged_promotion(home: Home) -> PromotionReceipt:
    """Well formed, hashes to its id, validates: but its rule says 0.5 <= 0.02 passed, so it promotes a challenger that failed."""
    tree = home.blobs.put_bytes(b"challenger tree")
    rule = RuleValue(metric="wer", statistic="delta_high", op="<=", threshold=0.02, value=0.5, passed=True, detail="forged")
    challenger = ChallengerDecision(
        name="epoch47", checkpoint_receipt="c" * 64, tree_sha256=tree, epoch=47, cv_loss=1.0, rules=(rule,), passed=True
    )
    return build_receipt(
        PromotionReceipt, flow="test", task="promote", started_at=utc_now(),
        parameters=PromotionParameters(
            policy_sha256="d" * 64, training_run="e" * 64, evaluation="f" * 64, incumbent="base", incumbent_sha256="a" * 64,
            serving_base_sha256=None,
        ),
        result=PromotionResult(challengers=(challenger,), promoted="epoch47", moves=()),
    )  # fmt: skip


@pytest.fixture
def bucket(make_store: Any) -> S3BlobStore:
    return make_store()  # type: ignore[no-any-return]


def test_a_pulled_forged_receipt_is_refused_and_not_indexed(bucket: S3BlobStore, tmp_path: Path) -> None:
    writer, reader = Home(tmp_path / "w"), Home(tmp_path / "r")
    genuine = writer.record(ingest_receipt(1, out=writer.blobs.put_bytes(b"genuine")))
    forged = writer.record(_forged_promotion(writer))
    push_to(writer, bucket)
    report = ingest_from(bucket, reader)
    assert len(report.refused) == 1 and forged in report.refused[0] and "(promotion)" in report.refused[0], report.refused
    assert "says passed=True for value 0.5 <= 0.02" in report.refused[0] and "not indexed" in report.refused[0]
    assert (report.receipts_copied, report.catalog_rows_new) == (1, 1)
    assert set(reader.receipts.ids()) == {genuine} and not reader.blobs.has(forged)
    with reader.catalog.connect(read_only=True) as con:
        assert con.execute("SELECT receipt_sha256 FROM receipts").fetchall() == [(genuine,)]


def test_under_trust_the_same_receipt_is_indexed(bucket: S3BlobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXLEDGER_PULLED_RECEIPTS", "trust")
    writer, reader = Home(tmp_path / "w"), Home(tmp_path / "r")
    forged = writer.record(_forged_promotion(writer))
    push_to(writer, bucket)
    report = ingest_from(bucket, reader)
    assert report.refused == [] and set(reader.receipts.ids()) == {forged}


def test_a_damaged_local_copy_of_a_named_object_is_fetched_again(bucket: S3BlobStore, tmp_path: Path) -> None:
    writer, reader = Home(tmp_path / "w"), Home(tmp_path / "r")
    out = writer.blobs.put_bytes(b"output bytes" * 100)
    rid = writer.record(ingest_receipt(2, out=out))
    push_to(writer, bucket)
    reader.blobs.put_bytes(b"output bytes" * 100)
    path = reader.blobs.path_of(out)
    path.chmod(0o644)
    path.write_bytes(b"rotted bytes" * 100)
    report = ingest_from(bucket, Home(reader.root))
    assert report.refused == [] and report.blobs_copied == 1 and set(reader.receipts.ids()) == {rid}
    assert Home(reader.root).blobs.intact(out)
