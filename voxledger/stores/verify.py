"""``voxledger store verify``: every object re-hashed, every receipt walked, the catalog checked.

Three checks, each reported apart:

- **damaged**: an object in ``objects/`` whose bytes do not hash to its name;
- **missing**: an object some receipt names (an output, trees whole, or an input: an artifact,
  a tree whole when a receipt recorded it as its tree output, or a parent receipt) that is not in
  the store, unless a prune receipt records removing it; a receipt listed in ``receipts/`` whose
  own object is gone counts too;
- **catalog**: a catalog file that cannot be read whole (every table is scanned, so a block
  failing DuckDB's checksum is found, not only the blocks a query happens to touch), a catalog
  row that disagrees with the receipt it indexes (its kind, status, cache key, document,
  artifacts or lineage edges), a row for a receipt the store does not hold, a receipt in the
  store the catalog does not index (a crash before the catalog commit, or another home's writes
  to a shared store), or index tables that no longer match the sums their last write recorded.
  The catalog is an index: any disagreement is repaired by ``voxledger catalog rebuild``.

Objects are hashed on all cores, whatever the stat cache says; a damaged object's stat-cache entry
is dropped, so reuse reads it again. ``deep`` (``store verify --deep``, the scheduled scrub) also
re-hashes every other file the stat cache vouches for: corpus audio, source trees, model files
(``stores.scrub``), and drops each entry that no longer holds.

Lineage and provenance commands check less on every answer (``check_walked_edges``): the sums,
and each receipt the walk passes through read back from the store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from voxledger.schemas.errors import VoxledgerError
from voxledger.stores.catalog import core_rows
from voxledger.stores.hashing import StatKey, map_on_cores, sha256_file, stat_key
from voxledger.stores.home import Home
from voxledger.stores.scrub import ScrubReport, scrub_stat_cache
from voxledger.stores.trees import TREE_MEDIA_TYPE, objects_behind

Progress = Callable[[str, int, int], None]
"""(phase, done, total): called as the check advances."""


@dataclass
class VerifyReport:
    """What ``verify_store`` checked and every problem it found, one line each (``stat_cache``: what
    the ``deep`` scrub found, None without it)."""

    objects: int = 0
    receipts: int = 0
    damaged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    catalog: list[str] = field(default_factory=list)
    stat_cache: ScrubReport | None = None

    @property
    def problems(self) -> list[str]:
        return [*self.damaged, *self.missing, *self.catalog, *(self.stat_cache.lied if self.stat_cache else [])]


def verify_store(home: Home, progress: Progress | None = None, *, deep: bool = False) -> VerifyReport:
    """Run the three checks over the whole home (see the module docstring); ``deep`` also scrubs the
    stat cache (``stores.scrub``). A damaged object's stat-cache entry is dropped either way, so reuse
    stops vouching for it."""
    report = VerifyReport()
    hashed = _hash_objects(home, report, progress)
    bad = {sha for sha, (actual, _key) in hashed.items() if actual != sha}
    lying = [key for sha, (_actual, key) in hashed.items() if sha in bad and key is not None]
    if lying and not home.read_only:
        home.stat_cache.drop(lying)
    docs = _walk_receipts(home, bad, report, progress)
    scan_catalog(home)
    report.catalog = catalog_drift(home, docs)
    try:
        with home.catalog.connect(read_only=True) as con:
            home.catalog.check_sums(con)
    except VoxledgerError as exc:
        report.catalog.append(str(exc))
    if deep:
        if progress is not None:
            progress("scrubbing the stat cache", 0, 1)
        report.stat_cache = scrub_stat_cache(
            home.stat_cache, {key: actual for actual, key in hashed.values() if key is not None and actual is not None}
        )
    return report


def _hash_objects(home: Home, report: VerifyReport, progress: Progress | None) -> dict[str, tuple[str | None, StatKey | None]]:
    """Re-hash every object on all cores: digest -> (what its bytes hash to, None when unreadable; its stat key)."""
    digests = sorted(home.blobs.iter_digests())
    report.objects = len(digests)
    out: dict[str, tuple[str | None, StatKey | None]] = {}
    step = 256
    for start in range(0, len(digests), step):
        chunk = digests[start : start + step]
        out.update(zip(chunk, map_on_cores(lambda d: _hash_object(home, d), chunk), strict=True))
        if progress is not None:
            progress("hashing objects", min(start + step, len(digests)), len(digests))
    for sha, (actual, _key) in out.items():
        if actual is None:
            report.damaged.append(f"object {sha} at {home.blobs.path_of(sha)} cannot be read; restore it from a replica")
        elif actual != sha:
            report.damaged.append(
                f"object {sha} at {home.blobs.path_of(sha)} is corrupt: its bytes hash to {actual}; "
                "restore it from a replica or re-put the original file"
            )
    return out


def _hash_object(home: Home, sha: str) -> tuple[str | None, StatKey | None]:
    path = home.blobs.path_of(sha)
    try:
        st = os.stat(path)
        return sha256_file(path), stat_key(st)
    except OSError:
        return None, None


def scan_catalog(home: Home) -> None:
    """Read every table of the catalog to its last row and column, so a block failing DuckDB's checksum is found
    whichever table holds it (the other checks read only some). Raises the catalog's one-line damage error."""
    with home.catalog.connect(read_only=True) as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()]
        for table in tables:
            cursor = con.execute(f'SELECT * FROM "{table}"')
            while cursor.fetchmany(4096):
                pass


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
    unindexed = [rid for rid in docs if rid not in rows]
    if unindexed:  # recorded but never committed (the catalog row is the commit point), or written by another home
        drift.append(
            f"the store holds {len(unindexed)} receipt(s) the catalog does not index (e.g. {unindexed[0]}): a crash before the "
            f"catalog commit, or another home writing to this store; {fix} (it indexes them)"
        )
    for rid, doc in docs.items():
        if rid not in rows:
            continue
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


def check_walked_edges(home: Home, edges: Iterable[tuple[str, str, str, str]]) -> None:
    """Check lineage edges (src, dst, role, direction) read from the catalog against the receipts that
    own them, before an answer is built on them; raise CatalogError naming the first that disagrees.

    The catalog is an index, and a rewrite of it (a bit flip that two copies of a digest in one
    block hide from DuckDB's checksum, an UPDATE) would otherwise change lineage answers silently.
    Every receipt an edge belongs to (the producer of an output, the reader of an input) is read
    from the store, verified against its id, and its whole edge set compared with the catalog's.
    """
    from voxledger.schemas.errors import CatalogError

    owners = sorted({src if direction == "output" else dst for src, dst, _role, direction in edges})
    fix = "`voxledger catalog rebuild` re-derives the catalog from the store (`voxledger store verify` checks everything)"
    with home.catalog.connect(read_only=True) as con:
        home.catalog.check_sums(con)  # the whole index at once: catches a rewrite no walk passes through
        for rid in owners:
            rows = con.execute(
                "SELECT src, dst, role, direction FROM edges WHERE (direction = 'output' AND src = ?) OR (direction = 'input' AND dst = ?)",
                [rid, rid],
            ).fetchall()
            got = {tuple(r) for r in rows}
            try:
                doc = home.receipts.read_json(rid)  # bytes verified against the id: what the edges are compared with
            except VoxledgerError as exc:
                raise CatalogError(
                    f"the catalog's lineage names receipt {rid}, which the store cannot give back ({str(exc).splitlines()[0][:160]}); {fix}"
                ) from exc
            try:
                want = {(e["src"], e["dst"], e["role"], e["direction"]) for e in core_rows(rid, doc)["edges"]}
            except (KeyError, TypeError, ValueError) as exc:
                raise CatalogError(
                    f"receipt {rid}, named by the catalog's lineage, is not a whole receipt document ({exc!r}); {fix}"
                ) from exc
            if got != want:
                extra = sorted(got - want)
                what = (
                    f"e.g. {extra[0][2]!r} edge {extra[0][0][:16]} -> {extra[0][1][:16]} is not in it"
                    if extra
                    else f"{len(want - got)} of its edges are absent"
                )
                raise CatalogError(f"the catalog's lineage disagrees with receipt {rid} ({what}); {fix}")
