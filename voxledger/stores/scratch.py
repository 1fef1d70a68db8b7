"""A scratch home holding what a recorded stage saw when it started, for re-running it.

``voxledger reproduce`` re-runs a stage in a fresh home so the original home's records are never
touched (only the reproduction receipt is added there). That home must hold what the stage read:
its input receipts and objects, and the catalog state it consulted (aliases, a run's checkpoints).
``seed_home`` gives it every receipt the original home had recorded before the stage started, and
the objects they name (trees whole), linked (or copied across file systems) after verifying them.
The stage's own receipt, and everything recorded after it started, stay out: the re-run must not
be served from cache or resume from the original's checkpoints.

``verify_inputs`` checks, before any work, that every input the receipt names and every output of
its parent receipts is present and hashes right, so a damaged input is refused by name instead of
surfacing as a failure deep inside the stage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.errors import BlobMissingError, DigestMismatchError, ReproductionError
from voxledger.stores.home import Home
from voxledger.stores.queries import output_trees
from voxledger.stores.trees import TREE_MEDIA_TYPE, damaged_objects, load_manifest


@dataclass(frozen=True)
class SeedReport:
    """What a scratch home was given: receipts and objects, and objects older receipts name that
    were missing or damaged in the original home (not given; the re-run fails if it needs one)."""

    receipts: int
    objects: int
    unavailable: int


def receipts_before(home: Home, when: datetime) -> list[str]:
    """Ids of the receipts the catalog lists as finished before ``when``, oldest first."""
    with home.catalog.connect(read_only=True) as con:
        rows = con.execute("SELECT receipt_sha256 FROM receipts WHERE finished_at < ? ORDER BY finished_at", [when]).fetchall()
    return [str(r[0]) for r in rows]


def verify_inputs(home: Home, receipt: ReceiptBase, rid: str, trees: tuple[str, ...] = ()) -> int:
    """Check every input of ``receipt`` and every output of its parent receipts; return the objects checked.

    ``trees`` names inputs that are trees though no receipt wrote them as an output (an equivalence
    receipt's stage dumps): they are checked whole, like tree outputs.

    Parents the stage wrote itself (recorded after it started: a training run's checkpoints, a
    promotion's gate evaluation) are read but their outputs are not required: the re-run writes
    its own, so a pruned checkpoint does not stop a reproduction.

    Raises:
        ReproductionError: naming the input (role and digest) that is missing or does not verify, and the fix.
    """
    tree_inputs = {*trees, *output_trees(home.catalog, [i.sha256 for i in receipt.inputs if i.ref == "artifact"])}
    checked = 0
    for ref in receipt.inputs:
        if ref.ref == "receipt":
            parent = _read_parent(home, rid, ref.role, ref.sha256)
            checked += 1
            if parent.finished_at > receipt.started_at:
                continue  # written by the stage itself (a run's checkpoints, a promotion's gate evaluation): a re-run makes its own
            for subject in parent.subjects:
                what = f"{ref.role} ({getattr(parent, 'kind', 'receipt')} {ref.sha256[:12]}) output {subject.role!r}"
                _require(home, rid, what, subject.sha256, subject.media_type)
                checked += 1
        else:
            _require(home, rid, f"input {ref.role!r}", ref.sha256, TREE_MEDIA_TYPE if ref.sha256 in tree_inputs else "")
            checked += 1
    return checked


def _read_parent(home: Home, rid: str, role: str, parent_rid: str) -> ReceiptBase:
    try:
        return home.receipts.read(parent_rid)
    except (BlobMissingError, DigestMismatchError) as exc:
        raise ReproductionError(
            f"receipt {rid[:12]} cannot be reproduced: its input {role!r}, receipt {parent_rid}, is missing or damaged ({exc}); "
            "restore it (`voxledger store pull` from a replica) and run again"
        ) from None


def _require(home: Home, rid: str, what: str, sha256: str, media_type: str) -> None:
    try:
        bad = damaged_objects(home.blobs, sha256, media_type)
    except (BlobMissingError, DigestMismatchError):
        bad = [sha256]
    if bad:
        state = "missing" if not home.blobs.has(bad[0]) else "damaged (its bytes do not hash to its name)"
        raise ReproductionError(
            f"receipt {rid[:12]} cannot be reproduced: {what} {sha256} has {len(bad)} object(s) {state}, e.g. {bad[0]}; "
            "restore it (`voxledger store pull` from a replica, or re-run the stage that produced it) and run again"
        )


def seed_home(src: Home, dst: Home, before: datetime, trees: tuple[str, ...] = ()) -> SeedReport:
    """Give ``dst`` every receipt ``src`` recorded before ``before`` and the intact objects they name,
    and the trees ``trees`` whole (inputs of the re-run stage that no earlier receipt wrote)."""
    rids = receipts_before(src, before)
    docs: list[tuple[str, dict[str, Any]]] = []
    wanted: dict[str, None] = {}
    for rid in rids:
        doc = src.receipts.read_document(rid)
        docs.append((rid, doc))
        for subject in doc["subjects"]:
            wanted.update(dict.fromkeys(_behind(src, subject["sha256"], subject["media_type"])))
        wanted.update(dict.fromkeys(i["sha256"] for i in doc["inputs"] if i["ref"] == "artifact"))
    for tree in trees:
        wanted.update(dict.fromkeys(_behind(src, tree, TREE_MEDIA_TYPE)))
    bad = set(src.blobs.damaged(d for d in wanted if src.blobs.has(d)))
    given = unavailable = 0
    for digest in wanted:
        if not src.blobs.has(digest) or digest in bad:
            unavailable += 1
            continue
        _link(src, dst, digest)
        given += 1
    for rid, _doc in docs:
        written, _ = dst.receipts.write(src.receipts.read(rid))
        if written != rid:  # a receipt is stored as its canonical bytes: the same document has the same id
            raise ReproductionError(f"receipt {rid} did not keep its id when copied into the scratch home ({written}); a defect")
    dst.catalog.ingest(docs, dst.blobs.get_bytes)
    return SeedReport(len(docs), given, unavailable)


def _behind(home: Home, sha256: str, media_type: str) -> list[str]:
    if media_type != TREE_MEDIA_TYPE or not home.blobs.intact(sha256):
        return [sha256]
    return [sha256, *(e.sha256 for e in load_manifest(home.blobs, sha256).entries)]


def _link(src: Home, dst: Home, digest: str) -> None:
    """The object in ``dst``: a hard link to ``src``'s (objects are never written in place), else a verified copy."""
    target = dst.blobs.path_of(digest)
    if target.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src.blobs.path_of(digest), target)
    except OSError:  # another file system, or links not allowed: copy (hashed while copied)
        dst.blobs.put_file(src.blobs.path_of(digest), expected_sha256=digest)
