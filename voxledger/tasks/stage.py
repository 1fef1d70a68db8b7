"""The one stage runner every task uses: verified reuse, then build, then record.

A stage's cache key is computed from its inputs before any work. ``reuse`` serves a stored
receipt only after the receipt and every object behind its outputs (tree artifacts whole) hash
right; a damaged object is moved to quarantine and the stage runs again, so its producer
regenerates the bytes (a put of the right bytes heals the store). The same receipt id comes back
whether the stage ran or not, so lineage is identical either way. ``record`` commits a new
receipt, and ``Home.record`` refuses one that names a missing or damaged output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.errors import BlobMissingError, DigestMismatchError, ReceiptError
from voxledger.stores.home import Home
from voxledger.stores.trees import damaged_objects

R = TypeVar("R", bound=ReceiptBase)


@dataclass(frozen=True)
class StageOutcome(Generic[R]):
    """What a stage returns: the receipt id, the typed receipt, and whether it was reused."""

    receipt_id: str
    receipt: R
    cached: bool


def damaged_outputs(home: Home, receipt: ReceiptBase) -> list[str]:
    """Digests of missing or damaged objects behind a receipt's outputs (empty when all verify)."""
    bad: list[str] = []
    for subject in receipt.subjects:
        bad += damaged_objects(home.blobs, subject.sha256, subject.media_type)
    return bad


def reuse(home: Home, key: str | None, kind: type[R], *, report: Callable[[str], None] | None = None) -> StageOutcome[R] | None:
    """The stored receipt for ``key`` when it and all its outputs verify; None means run the stage.

    Damaged outputs are quarantined (kept under ``store/quarantine``) so the re-run regenerates
    them; ``report`` hears which.
    """
    rid = home.find_cached(key) if key else None
    if rid is None:
        return None
    try:
        receipt = home.receipts.read(rid, kind)
    except (BlobMissingError, DigestMismatchError) as exc:
        home.blobs.quarantine(rid)  # damaged bytes: kept aside, never served
        _say(report, f"receipt {rid[:12]} is missing or damaged ({exc}); running the stage again")
        return None
    except ReceiptError as exc:  # intact bytes this code no longer accepts: not reusable, not damaged
        _say(report, f"receipt {rid[:12]} does not validate under this code ({exc}); running the stage again")
        return None
    bad = damaged_outputs(home, receipt)
    for sha in bad:
        home.blobs.quarantine(sha)
    if bad:
        _say(report, f"{len(bad)} damaged output(s) of receipt {rid[:12]} quarantined (e.g. {bad[0][:12]}); regenerating")
        return None
    return StageOutcome(rid, receipt, cached=True)


def record(home: Home, receipt: R) -> StageOutcome[R]:
    """Commit a freshly built receipt (outputs checked first) and return it as an outcome."""
    return StageOutcome(home.record(receipt), receipt, cached=False)


def _say(report: Callable[[str], None] | None, message: str) -> None:
    logging.getLogger("voxledger.stage").warning(message)
    if report is not None:
        report(message)
