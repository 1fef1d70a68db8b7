"""Content-addressed stage caching shared by every task.

A stage's cache key is computed from its inputs before any work. On a hit the stored receipt and
every blob it names as output are re-verified (exist and hash right) before the receipt is
reused; the same receipt id comes back, so lineage is identical whether the stage ran or not.
"""

from __future__ import annotations

from typing import Any

from voxledger.schemas.errors import BlobMissingError, DigestMismatchError
from voxledger.stores.home import Home


def cached_receipt(home: Home, key: str) -> tuple[str, dict[str, Any]] | None:
    """The verified receipt for ``key``, or None when absent or when its blobs no longer verify."""
    rid = home.find_cached(key)
    if rid is None:
        return None
    try:
        doc = home.receipts.read_document(rid)
        for subject in doc["subjects"]:
            home.blobs.verify(subject["sha256"])
    except (BlobMissingError, DigestMismatchError):
        return None  # the evidence is damaged: run the stage again rather than trust it
    return rid, doc
