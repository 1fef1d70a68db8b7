"""``voxledger store verify``: every object re-hashed, every receipt walked, the catalog checked.

Three checks, each reported apart:

- **damaged**: an object in ``objects/`` whose bytes do not hash to its name;
- **missing**: an object some receipt names (an output, trees whole, or an input: an artifact,
  a tree whole when a receipt recorded it as its tree output, or a parent receipt) that is not in
  the store, unless a prune receipt records removing it; a receipt listed in ``receipts/`` whose
  own object is gone counts too;
- **catalog**: a catalog row that disagrees with the receipt it indexes (its kind, status, cache
  key, document, artifacts or lineage edges), or a row for a receipt the store does not hold. The
  catalog is an index: any disagreement is repaired by ``voxledger catalog rebuild``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from voxledger.schemas.errors import VoxledgerError
from voxledger.stores.catalog import core_rows
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, objects_behind

Progress = Callable[[str, int, int], None]
"""(phase, done, total): called as the check advances."""


@dataclass
class VerifyReport:
    """What ``verify_store`` checked and every problem it found, one line each."""

    objects: int = 0
    receipts: int = 0
    damaged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    catalog: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [*self.damaged, *self.missing, *self.catalog]


def verify_store(home: Home, progress: Progress | None = None) -> VerifyReport:
    """Run the three checks over the whole home (see the module docstring)."""
    report = VerifyReport()
    digests = sorted(home.blobs.iter_digests())
    report.objects = len(digests)
    bad: set[str] = set()
    for n, sha in enumerate(digests, 1):
        try:
            home.blobs.verify(sha)
        except VoxledgerError as exc:
            bad.add(sha)
            report.damaged.append(str(exc))
        if progress is not None:
            progress("hashing objects", n, len(digests))
    docs = _walk_receipts(home, bad, report, progress)
    report.catalog = catalog_drift(home, docs)
    return report


def _walk_receipts(home: Home, bad: set[str], report: VerifyReport, progress: Progress | None) -> dict[str, dict[str, Any]]:
    """Read every listed receipt and record every object it names that is not in the store."""
    ids = list(home.receipts.ids())
    report.receipts = len(ids)
    docs: dict[str, dict[str, Any]] = {}
    for n, rid in enumerate(ids, 1):
        if not home.blobs.has(rid):
            report.missing.append(f"receipt {rid} is listed in store/receipts but its object is missing; restore it from a replica")
        elif rid not in bad:
            try:
                docs[rid] = home.receipts.read_document(rid)
            except VoxledgerError as exc:
                report.damaged.append(f"receipt {rid} does not validate: {str(exc).splitlines()[0][:200]}")
        if progress is not None:
            progress("walking receipts", n, len(ids))
    pruned = {b for doc in docs.values() if doc["kind"] == "prune" for b in doc["parameters"]["removed_blobs"]}
    trees = {a["sha256"] for doc in docs.values() for a in doc["subjects"] if a["media_type"] == TREE_MEDIA_TYPE}
    named: dict[str, str] = {}  # missing digest -> who names it (first referrer)
    counts: dict[str, int] = {}
    for rid, doc in docs.items():
        refs = [(f"output {a['role']!r}", a["sha256"], a["media_type"]) for a in doc["subjects"]]
        refs += [(f"input {i['role']!r}", i["sha256"], TREE_MEDIA_TYPE if i["sha256"] in trees else "") for i in doc["inputs"]]
        for what, sha, media_type in refs:
            behind = [sha] if sha in bad else objects_behind(home.blobs, sha, media_type)
            for obj in behind:
                if obj in pruned or home.blobs.has(obj):
                    continue
                named.setdefault(obj, f"{what} of {doc['kind']} receipt {rid}")
                counts[obj] = counts.get(obj, 0) + 1
    for obj, who in named.items():
        also = f" (and {counts[obj] - 1} more reference(s))" if counts[obj] > 1 else ""
        report.missing.append(f"object {obj} is missing: {who}{also}; restore it (`voxledger store pull`) or re-run its stage")
    return docs


def catalog_drift(home: Home, docs: dict[str, dict[str, Any]]) -> list[str]:
    """Catalog rows that disagree with the receipts in ``docs`` (id -> document), one line per receipt."""
    with home.catalog.connect(read_only=True) as con:
        rows = {r[0]: r[1:] for r in con.execute("SELECT receipt_sha256, kind, status, cache_key, doc FROM receipts").fetchall()}
        edges: dict[str, set[tuple[str, ...]]] = {}
        for src, dst, role, direction, src_ref in con.execute("SELECT src, dst, role, direction, src_ref FROM edges").fetchall():
            owner = src if direction == "output" else dst
            edges.setdefault(owner, set()).add((src, dst, role, direction, src_ref))
        artifacts = {r[0]: (r[1], r[2]) for r in con.execute("SELECT sha256, size_bytes, media_type FROM artifacts").fetchall()}
    fix = "`voxledger catalog rebuild` re-derives it from the store"
    drift: list[str] = []
    for rid, doc in docs.items():
        if rid not in rows:
            continue  # recorded but not yet committed to the catalog (the catalog row is the commit point)
        want = core_rows(rid, doc)
        r = want["receipts"][0]
        kind, status, key, stored_doc = rows.pop(rid)
        wrong = [
            name
            for name, got, exp in (("kind", kind, r["kind"]), ("status", status, r["status"]), ("cache_key", key, r["cache_key"]))
            if got != exp
        ]
        if _loads(stored_doc) != doc:
            wrong.append("doc")
        want_edges = {(e["src"], e["dst"], e["role"], e["direction"], e["src_ref"]) for e in want["edges"]}
        got_edges = edges.pop(rid, set())
        if got_edges != want_edges:
            extra = sorted(got_edges - want_edges)
            wrong.append(
                f"edges ({len(extra)} not in the receipt, e.g. {extra[0][:3]}; {len(want_edges - got_edges)} absent)"
                if extra
                else f"edges ({len(want_edges - got_edges)} absent)"
            )
        for a in want["artifacts"]:
            if artifacts.get(a["sha256"]) not in (None, (a["size_bytes"], a["media_type"])):
                wrong.append(f"artifact {a['sha256']} size/media type")
        if wrong:
            drift.append(f"catalog row of receipt {rid} disagrees with the receipt: {', '.join(wrong)}; {fix}")
    if rows:
        drift.append(f"catalog lists {len(rows)} receipt(s) the store does not hold (e.g. {next(iter(rows))}); {fix}")
    strays = [o for o in edges if o not in docs]
    if strays:
        drift.append(f"catalog holds lineage edges of {len(strays)} receipt(s) the store does not hold (e.g. {strays[0]}); {fix}")
    return drift


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
