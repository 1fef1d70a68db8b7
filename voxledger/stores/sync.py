"""Moving receipts and their blobs between a local home and the shared S3 store.

The shared store is the record several machines write to; the DuckDB catalog (one writer) is an
index rebuilt from it. Both directions follow the append-only order: blobs first, then the
receipt object, then its marker (remote) or catalog row (local), so a reader that sees a receipt
can always fetch what it names. Every receipt is verified against its id and validated against
its schema on the way; every copy is idempotent, so an interrupted sync is simply run again.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from typing import Any

from voxledger.schemas.errors import BlobMissingError, ReceiptError
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.home import Home
from voxledger.stores.receipts import validate_document
from voxledger.stores.s3 import S3BlobStore
from voxledger.stores.trees import TREE_MEDIA_TYPE, TreeManifest, check_relative

BATCH = 5000


@dataclass
class SyncReport:
    """What one sync did; ``missing_blobs`` lists (receipt id, digest) pairs the source lacked."""

    receipts_seen: int = 0
    receipts_copied: int = 0
    blobs_copied: int = 0
    bytes_copied: int = 0
    catalog_rows_new: int = 0
    missing_blobs: list[tuple[str, str]] = field(default_factory=list)


def referenced_blobs(doc: dict[str, Any]) -> list[tuple[str, bool]]:
    """(digest, is_tree) of every blob a receipt names: its subjects and its artifact inputs."""
    found = [(a["sha256"], a["media_type"] == TREE_MEDIA_TYPE) for a in doc["subjects"]]
    found += [(i["sha256"], False) for i in doc["inputs"] if i["ref"] == "artifact"]
    return list(dict.fromkeys(found))


def _tree_entries(manifest_bytes: bytes) -> list[str]:
    manifest = TreeManifest.model_validate(json.loads(manifest_bytes))
    for entry in manifest.entries:
        check_relative(entry.path)
    return [e.sha256 for e in manifest.entries]


def _read_remote_receipt(remote: S3BlobStore, rid: str) -> tuple[bytes, dict[str, Any]]:
    try:
        data = remote.get_bytes(rid)  # verified against the id
    except BlobMissingError as exc:
        raise ReceiptError(
            f"{remote.url}receipts/{rid[:2]}/{rid} lists receipt {rid} but its object is missing; "
            "run push_to again on the machine that wrote it"
        ) from exc
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ReceiptError(f"receipt {rid} in {remote.url} is not JSON: {exc}") from exc
    validate_document(doc, source=f"receipt {rid} in {remote.url}")
    return data, doc


def _fetch(remote: S3BlobStore, local: LocalBlobStore, sha256: str, report: SyncReport) -> None:
    """Copy one object from the shared store into the local store (streamed, verified twice)."""
    tmp = local.tmp / f"fetch-{os.getpid()}-{secrets.token_hex(8)}"
    try:
        remote.export(sha256, tmp)
        local.put_file(tmp, expected_sha256=sha256)
        report.blobs_copied += 1
        report.bytes_copied += tmp.stat().st_size
    finally:
        tmp.unlink(missing_ok=True)


def _add_marker(home: Home, rid: str) -> None:
    marker = home.receipts.markers / rid[:2] / rid
    marker.parent.mkdir(exist_ok=True)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444))
    except FileExistsError:
        pass


def ingest_from(remote: S3BlobStore, home: Home) -> SyncReport:
    """Copy every receipt listed in the shared store, and the blobs it names, into ``home``.

    Receipts are verified against their ids and validated; tree subjects bring their files. Blobs
    the shared store lacks are listed in ``missing_blobs`` (the receipt is still indexed, as it
    would be locally). Catalog rows go in last, in batches, idempotently.

    Raises:
        ReceiptError: a listed receipt is missing, corrupt JSON or fails its schema.
        DigestMismatchError: a shared object's bytes do not hash to its key.
    """
    report = SyncReport()
    pending: list[tuple[str, dict[str, Any]]] = []
    for rid in remote.receipt_ids():
        report.receipts_seen += 1
        data, doc = _read_remote_receipt(remote, rid)
        for sha256, is_tree in referenced_blobs(doc):
            digests = [sha256]
            if is_tree and remote.has(sha256):
                digests += _tree_entries(remote.get_bytes(sha256))
            for d in digests:
                if home.blobs.has(d):
                    continue
                if remote.has(d):
                    _fetch(remote, home.blobs, d, report)
                else:
                    report.missing_blobs.append((rid, d))
        if not home.blobs.has(rid):
            report.receipts_copied += 1
        home.blobs.put_bytes(data)
        _add_marker(home, rid)
        pending.append((rid, doc))
    for start in range(0, len(pending), BATCH):
        report.catalog_rows_new += home.catalog.ingest(pending[start : start + BATCH])
    return report


def push_to(home: Home, remote: S3BlobStore) -> SyncReport:
    """Copy every local receipt, and the blobs it names, into the shared store.

    Blobs go first, then the receipt object, then its marker, so another machine never lists a
    receipt whose blobs are still on the way. Blobs the local store lacks are listed in
    ``missing_blobs``; objects already shared are verified, never rewritten.
    """
    report = SyncReport()
    for rid in home.receipts.ids():
        report.receipts_seen += 1
        doc = home.receipts.read_document(rid)
        for sha256, is_tree in referenced_blobs(doc):
            digests = [sha256]
            if is_tree and home.blobs.has(sha256):
                digests += _tree_entries(home.blobs.get_bytes(sha256))
            for d in digests:
                if not home.blobs.has(d):
                    report.missing_blobs.append((rid, d))
                elif not remote.has(d):
                    remote.put_file(home.blobs.path_of(d), expected_sha256=d)
                    report.blobs_copied += 1
                    report.bytes_copied += home.blobs.size_of(d)
        if not remote.has(rid):
            remote.put_file(home.blobs.path_of(rid), expected_sha256=rid)
            report.receipts_copied += 1
        remote.mark_receipt(rid)
    return report
