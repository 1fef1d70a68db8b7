"""Canonical JSON, receipt ids, generated schemas and validation."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.factories import hexd, ingest_receipt, record_synthetic
from voxledger.schemas.canonical import canonical_bytes, canonical_digest
from voxledger.schemas.errors import ReceiptError
from voxledger.schemas.registry import KINDS, schema_files
from voxledger.stores.receipts import SCHEMA_DIR, validate_document

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_canonical_round_trip_and_stability(value: object) -> None:
    raw = canonical_bytes(value)
    assert json.loads(raw) == value
    assert canonical_bytes(json.loads(raw)) == raw


def test_key_order_and_whitespace_do_not_change_identity() -> None:
    a = json.loads('{"b": 1, "a": [1, 2, {"y": null, "x": "é"}]}')
    b = json.loads('{ "a": [1,2,{"x":"é","y":null}],\n "b":1 }')
    assert canonical_digest(a) == canonical_digest(b)
    # RFC 8785 fixes the number format: 1.0 and 1 are the same JSON number
    assert canonical_bytes({"n": 1.0}) == b'{"n":1}'


def test_receipt_id_includes_timestamps_by_design() -> None:
    r = ingest_receipt(1)
    same = ingest_receipt(1)
    later = r.model_copy(update={"finished_at": r.finished_at + timedelta(seconds=1)})
    assert canonical_digest(r) == canonical_digest(same)
    assert canonical_digest(r) != canonical_digest(later)


def test_generated_schemas_match_the_committed_files() -> None:
    files = schema_files()
    assert len(files) == len(KINDS) == 21, "a receipt kind was added: update this count deliberately"
    for name, text in files.items():
        committed = SCHEMA_DIR / name
        assert committed.is_file(), f"{name} missing: run `voxledger receipt schemas --write`"
        assert committed.read_text() == text, f"{name} drifted from its model: run `voxledger receipt schemas --write`"


def test_invalid_receipt_lists_every_problem() -> None:
    doc = ingest_receipt(1).model_dump(mode="json")
    doc["subjects"][0]["sha256"] = "not-a-digest"
    doc["parameters"]["file_count"] = -3
    doc["surprise"] = True
    with pytest.raises(ReceiptError) as exc:
        validate_document(doc)
    msg = str(exc.value)
    assert "3 schema problem(s)" in msg
    assert "subjects/0/sha256" in msg and "parameters/file_count" in msg and "surprise" in msg


def test_unknown_kind_is_refused_with_the_valid_kinds() -> None:
    with pytest.raises(ReceiptError, match=r"unknown receipt kind 'mystery'.*ingest"):
        validate_document({"kind": "mystery"})


def test_naive_timestamps_are_refused() -> None:
    doc = ingest_receipt(1).model_dump(mode="json")
    doc["started_at"] = "2026-01-01T00:00:00"
    with pytest.raises(ReceiptError, match="started_at"):
        validate_document(doc)


def test_tampered_receipt_blob_is_detected(home) -> None:  # type: ignore[no-untyped-def]
    rid = record_synthetic(home, ingest_receipt(5, out=hexd(99)))[0]
    path = home.blobs.path_of(rid)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(b'"item-5"', b'"item-6"'))
    from voxledger.schemas.errors import DigestMismatchError

    with pytest.raises(DigestMismatchError, match=rid):
        home.receipts.read_document(rid)
