"""The one stage runner every task uses: verified reuse, then build, then record.

A stage's cache key is computed from its inputs before any work. The catalog only points at
candidates: ``reuse`` serves a stored receipt only after the receipt hashes to its id, records
the very cache key asked for (a catalog row claiming another key is passed over), succeeded, and
its parts agree with each other (``stores.consistency``: a well-formed forgery is not served), and
every object behind its outputs and its inputs hashes right: a tree output whole, and a tree
input whole when some receipt recorded it as its tree output (a source tree that only names files
on disk, say a corpus's audio before it was stored, is bound by its manifest's digest alone). A damaged
output is moved to quarantine and the stage runs again, so its producer regenerates the bytes (a
put of the right bytes heals the store); a missing or damaged input is quarantined and the stage
refuses with a clear error, since running again could not bring it back. The outputs of the
receipts it read (a promotion's gate evaluation and its clips, a run's checkpoints) are the
evidence it certified, and are checked too: a damaged one is quarantined and the stage runs
again, so the receipt that produced it regenerates it instead of being vouched for. The same
receipt id comes back whether the stage ran or not, so lineage is identical either way. ``record`` commits
a new receipt, and ``Home.record`` refuses one that names a missing or damaged output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.errors import BlobMissingError, DigestMismatchError, ReceiptError
from voxledger.schemas.listening_receipts import AggregateReceipt, PacketSetReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.stores.consistency import inconsistencies
from voxledger.stores.home import Home
from voxledger.stores.queries import output_trees
from voxledger.stores.trees import TREE_MEDIA_TYPE, damaged_objects, objects_behind
from voxledger.tasks.packaging.publish import Published

R = TypeVar("R", bound=ReceiptBase)


@dataclass(frozen=True)
class ReuseCheck:
    """What a cache hit verified before it was served.

    ``objects``: distinct stored objects found intact (the receipt, its outputs and its inputs,
    trees whole, and the outputs of the receipts it read: ``evidence_objects``); ``passed_over``:
    catalog rows for the key that were not served (a receipt recording another key, failed,
    damaged or of another kind).
    """

    cache_key: str
    output_objects: int
    input_objects: int
    objects: int
    passed_over: int = 0
    evidence_objects: int = 0


@dataclass(frozen=True)
class StageOutcome(Generic[R]):
    """What a stage returns: the receipt id, the typed receipt, whether it was reused, and what
    the reuse verified (None when the stage ran, or when the check happened in another process)."""

    receipt_id: str
    receipt: R
    cached: bool
    verified: ReuseCheck | None = field(default=None, kw_only=True)


# The outcomes stages add fields to live here, beside StageOutcome, not in their stages' modules:
# a command served by the home's runner unpickles what its flow returned, and a class defined in a
# stage module would import that module's numerical stack into the command (tests/test_import_budget.py).


@dataclass(frozen=True)
class PackageOutcome(StageOutcome[PackageReceipt]):
    """A package stage outcome plus where the tar is (in the store; in the retention root if published)."""

    package_sha256: str = ""
    package_path: Path = Path()
    published: Published | None = None


@dataclass(frozen=True)
class PacketSetOutcome(StageOutcome[PacketSetReceipt]):
    """A packet-set stage outcome plus where each rater's folder was written."""

    packet_dirs: dict[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class AggregateOutcome(StageOutcome[AggregateReceipt]):
    """An aggregate stage outcome plus the accepted submissions' receipt ids."""

    submission_receipts: tuple[str, ...] = ()


def damaged_outputs(home: Home, receipt: ReceiptBase) -> list[str]:
    """Digests of missing or damaged objects behind a receipt's outputs (empty when all verify)."""
    bad: list[str] = []
    for subject in receipt.subjects:
        bad += damaged_objects(home.blobs, subject.sha256, subject.media_type)
    return bad


def reuse(home: Home, key: str | None, kind: type[R], *, report: Callable[[str], None] | None = None) -> StageOutcome[R] | None:
    """The stored receipt for ``key`` when it and everything it names verify; None means run the stage.

    Damaged outputs are quarantined (kept under ``store/quarantine``) so the re-run regenerates
    them; ``report`` hears which. Raises BlobMissingError or DigestMismatchError when an input of
    the matching receipt is missing or damaged (naming the role, the digest and the fix).
    """
    if not key:
        return None
    passed = 0
    for rid in home.cached_candidates(key):
        receipt = _trusted(home, rid, key, kind, report)
        if receipt is None:
            passed += 1
            continue
        lies = inconsistencies(receipt, home.blobs.get_bytes)
        if lies:  # well-formed yet contradicting itself (a forged copy pushed to a shared store, say): never served
            _say(report, f"{receipt.kind} receipt {rid[:12]} contradicts itself ({lies[0]}); not served, running the stage again")  # type: ignore[attr-defined]
            passed += 1
            continue
        outputs = _objects(home, [(s.role, s.sha256, s.media_type) for s in receipt.subjects])
        trees = output_trees(home.catalog, [i.sha256 for i in receipt.inputs if i.ref == "artifact"])
        inputs = _objects(home, [(i.role, i.sha256, TREE_MEDIA_TYPE if i.sha256 in trees else "") for i in receipt.inputs])
        evidence = {sha: role for sha, role in _evidence(home, receipt).items() if sha not in inputs and sha not in outputs}
        bad = home.blobs.damaged([*outputs, *inputs, *evidence])
        bad_inputs = [d for d in bad if d in inputs]
        for sha in bad:
            home.blobs.quarantine(sha)
        if bad_inputs:
            raise _input_error(receipt, rid, bad_inputs, inputs)
        if bad:
            where = "output(s)" if bad[0] in outputs else f"object(s) of the evidence it read ({evidence[bad[0]]})"
            _say(report, f"{len(bad)} damaged {where} of receipt {rid[:12]} quarantined (e.g. {bad[0][:12]}); regenerating")
            return None
        check = ReuseCheck(key, len(outputs), len(inputs), len({rid, *outputs, *inputs, *evidence}), passed, len(evidence))
        logging.getLogger("voxledger.stage").info("reused %s receipt %s: %d object(s) verified", receipt.kind, rid[:12], check.objects)  # type: ignore[attr-defined]
        return StageOutcome(rid, receipt, cached=True, verified=check)
    return None


def _trusted(home: Home, rid: str, key: str, kind: type[R], report: Callable[[str], None] | None) -> R | None:
    """The receipt a catalog row names, when it hashes right, is of ``kind``, succeeded and records ``key``."""
    try:
        receipt = home.receipts.read(rid, kind)
    except (BlobMissingError, DigestMismatchError) as exc:
        home.blobs.quarantine(rid)  # damaged bytes: kept aside, never served
        home.receipts.set_aside(rid)  # and no longer listed, so a rebuild does not trip over it
        _say(report, f"receipt {rid[:12]} is missing or damaged ({exc}); running the stage again")
        return None
    except ReceiptError as exc:  # intact bytes this code no longer accepts: not reusable, not damaged
        _say(report, f"receipt {rid[:12]} does not validate under this code ({exc}); running the stage again")
        return None
    if receipt.cache_key != key or receipt.status != "succeeded":
        _say(
            report,
            f"the catalog lists receipt {rid[:12]} under cache key {key[:12]}, but the receipt records key "
            f"{(receipt.cache_key or 'none')[:12]} and status {receipt.status}: not served (the catalog disagrees "
            "with the store; `voxledger catalog rebuild` re-derives it)",
        )
        return None
    return receipt


def _evidence(home: Home, receipt: ReceiptBase) -> dict[str, str]:
    """Every object behind the outputs of the receipts ``receipt`` read (its ``ref: receipt`` inputs), each mapped to
    ``input role/output role``. A receipt input that cannot be read is left to the input check, which refuses it."""
    refs: list[tuple[str, str, str]] = []
    for i in receipt.inputs:
        if i.ref != "receipt":
            continue
        try:
            doc = home.receipts.read_document(i.sha256)
        except (BlobMissingError, DigestMismatchError, ReceiptError):
            continue
        refs += [(f"{i.role}/{s['role']}", s["sha256"], s["media_type"]) for s in doc.get("subjects", [])]
    return _objects(home, refs)


def _objects(home: Home, refs: list[tuple[str, str, str]]) -> dict[str, str]:
    """Every object behind ``refs`` (role, digest, media type) mapped to the first role it stands
    behind, in order."""
    found: dict[str, str] = {}
    for role, sha, media_type in refs:
        for obj in objects_behind(home.blobs, sha, media_type):
            found.setdefault(obj, role)
    return found


def _input_error(receipt: ReceiptBase, rid: str, bad: list[str], inputs: dict[str, str]) -> BlobMissingError:
    return BlobMissingError(
        f"{receipt.kind} receipt {rid} matches this work, but {len(bad)} of the {len(inputs)} object(s) behind its "  # type: ignore[attr-defined]
        f"inputs are missing or damaged (e.g. {bad[0]} of input {inputs[bad[0]]!r}; damaged copies are kept in "
        "store/quarantine): not served from cache. Restore the object (`voxledger store pull` from a replica, or "
        "re-run the stage that produced it) and run again"
    )


def record(home: Home, receipt: R) -> StageOutcome[R]:
    """Commit a freshly built receipt (outputs checked first, then that its parts agree: `stores.consistency`) and return it.

    Raises:
        ReceiptError: the receipt contradicts itself (a defect of the stage that built it; nothing is recorded).
    """
    lies = inconsistencies(receipt, home.blobs.get_bytes)
    if lies:
        raise ReceiptError(f"{receipt.kind} receipt not recorded, its parts disagree: " + "; ".join(lies[:5]))  # type: ignore[attr-defined]
    return StageOutcome(home.record(receipt), receipt, cached=False)


def _say(report: Callable[[str], None] | None, message: str) -> None:
    logging.getLogger("voxledger.stage").warning(message)
    if report is not None:
        report(message)
