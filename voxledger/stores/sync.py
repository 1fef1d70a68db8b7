"""Moving receipts and their blobs between a local home and the shared S3 store.

The shared store is the record several machines write to; the DuckDB catalog (one writer) is an
index rebuilt from it. Both directions follow the append-only order: blobs first, then the
receipt object, then its marker and a journal segment (remote) or catalog row (local), so a
reader that sees a receipt can always fetch what it names. Every receipt is verified against its
id and validated against its schema on the way; every copy is idempotent, so an interrupted sync
is simply run again.

Cost scales with what changed, not with the size of the bucket. A home remembers, per shared
store, the receipts it knows the store holds (pushed or pulled) and the journal segments it has
applied (``sync/<store digest>.sqlite``). A push of nothing new makes no request; a pull lists
the journal from just before its cursor (one request when nothing changed) and reads only new
segments, receipts and blobs. Transfers run on a bounded thread pool (``S3Config.max_workers``).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from voxledger.schemas.errors import BlobMissingError, ReceiptError
from voxledger.settings import load_settings
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.consistency import inconsistencies
from voxledger.stores.hashing import stat_cache_use
from voxledger.stores.home import Home
from voxledger.stores.receipts import validate_document
from voxledger.stores.s3 import S3BlobStore
from voxledger.stores.trees import TREE_MEDIA_TYPE, TreeManifest, check_relative, damaged_objects

BATCH = 5000
SEGMENT_RECEIPTS = 50_000  # receipts named per journal segment (about 3.3 MB)
CLOCK_SKEW_S = 900  # a segment stamped further ahead of the reader's clock than this is reported (its writer's clock is off)
T = TypeVar("T")
U = TypeVar("U")


@dataclass
class SyncReport:
    """What one sync did; ``missing_blobs`` lists (receipt id, digest) pairs the source lacked."""

    receipts_seen: int = 0
    receipts_copied: int = 0
    blobs_copied: int = 0
    bytes_copied: int = 0
    catalog_rows_new: int = 0
    segments_read: int = 0
    missing_blobs: list[tuple[str, str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Pulled receipts not indexed under ``pulled_receipts=recheck``, one line each: what did not agree, and the fix."""
    clock_skew: list[str] = field(default_factory=list)
    """Journal segments stamped further ahead of this machine's clock than ``CLOCK_SKEW_S``: a writer's clock is off."""


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


class SyncState:
    """What a home knows about one shared store: receipts it holds, journal segments applied.

    A cache only: losing it costs one full pass (``full=True``), never correctness, because
    every copy is idempotent and verified.
    """

    def __init__(self, home: Home, remote: S3BlobStore) -> None:
        name = hashlib.sha256(remote.url.encode()).hexdigest()[:16]
        self.path = home.root / "sync" / f"{name}.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._conn() as con:
            con.execute("CREATE TABLE IF NOT EXISTS shared (rid TEXT PRIMARY KEY) WITHOUT ROWID")
            con.execute("CREATE TABLE IF NOT EXISTS segments (name TEXT PRIMARY KEY) WITHOUT ROWID")
            con.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            con.execute("INSERT OR IGNORE INTO meta VALUES ('url', ?)", [remote.url])

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=60)) as con, con:
            yield con

    def shared(self) -> set[str]:
        """Receipt ids known to be in the shared store."""
        with self._conn() as con:
            return {r for (r,) in con.execute("SELECT rid FROM shared")}

    def add_shared(self, rids: Iterable[str]) -> None:
        with self._conn() as con:
            con.executemany("INSERT OR IGNORE INTO shared VALUES (?)", [(r,) for r in rids])

    def applied(self, names: Iterable[str]) -> set[str]:
        """Which of ``names`` (journal segments) were already applied to the home."""
        names = list(names)
        with self._conn() as con:
            con.execute("CREATE TEMP TABLE probe (name TEXT)")
            con.executemany("INSERT INTO probe VALUES (?)", [(n,) for n in names])
            return {n for (n,) in con.execute("SELECT name FROM probe JOIN segments USING (name)")}

    def cursor(self) -> str | None:
        """The newest segment a pull listed, or None before the first pull.

        Only pulls move it: a push records its own segment as applied without moving the cursor,
        so segments other machines wrote earlier are still listed by the next pull.
        """
        with self._conn() as con:
            row = con.execute("SELECT v FROM meta WHERE k = 'cursor'").fetchone()
        return row[0] if row else None

    def add_applied(self, names: Iterable[str], *, cursor: str | None = None) -> None:
        with self._conn() as con:
            con.executemany("INSERT OR IGNORE INTO segments VALUES (?)", [(n,) for n in names])
            if cursor is not None:
                con.execute("INSERT OR REPLACE INTO meta VALUES ('cursor', ?)", [max(cursor, self._cursor_in(con))])

    @staticmethod
    def _cursor_in(con: sqlite3.Connection) -> str:
        row = con.execute("SELECT v FROM meta WHERE k = 'cursor'").fetchone()
        return str(row[0]) if row else ""


def _parallel(remote: S3BlobStore, fn: Callable[[T], U], items: list[T]) -> list[U]:
    """``fn`` over ``items`` on the store's bounded pool, results in order; the first error propagates."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(min(remote.config.max_workers, len(items))) as pool:
        return list(pool.map(fn, items))


def skewed(segments: list[str], now_ns: int) -> list[str]:
    """The segments stamped more than ``CLOCK_SKEW_S`` after ``now_ns`` (their writer's clock runs ahead)."""
    limit = now_ns + CLOCK_SKEW_S * 10**9
    return [s for s in segments if int(s.removeprefix("journal/").partition("-")[0]) > limit]


# ---- pull -----------------------------------------------------------------------------------------
def _read_remote_receipt(remote: S3BlobStore, rid: str) -> tuple[bytes, dict[str, Any]]:
    try:
        data = remote.get_bytes(rid)  # verified against the id
    except BlobMissingError as exc:
        raise ReceiptError(
            f"{remote.url} lists receipt {rid} but its object is missing; run push_to again on the machine that wrote it"
        ) from exc
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ReceiptError(f"receipt {rid} in {remote.url} is not JSON: {exc}") from exc
    validate_document(doc, source=f"receipt {rid} in {remote.url}")
    return data, doc


def _fetch(remote: S3BlobStore, local: LocalBlobStore, sha256: str) -> int | None:
    """Copy one object into the local store (streamed, verified twice); its size, None if absent."""
    tmp = local.tmp / f"fetch-{os.getpid()}-{secrets.token_hex(8)}"
    try:
        remote.export(sha256, tmp)
        local.put_file(tmp, expected_sha256=sha256)
        return tmp.stat().st_size
    except BlobMissingError:
        return None
    finally:
        tmp.unlink(missing_ok=True)


def _add_marker(home: Home, rid: str) -> None:
    marker = home.receipts.markers / rid[:2] / rid
    marker.parent.mkdir(exist_ok=True)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444))
    except FileExistsError:
        pass


def _tree_files(remote: S3BlobStore, home: Home, tree_sha256: str) -> list[str] | None:
    """The entries of a tree manifest, read locally when present; None when nobody has it."""
    if home.blobs.has(tree_sha256):
        return _tree_entries(home.blobs.get_bytes(tree_sha256))
    try:
        return _tree_entries(remote.get_bytes(tree_sha256))
    except BlobMissingError:
        return None


def _pull_receipts(remote: S3BlobStore, home: Home, rids: list[str], report: SyncReport) -> None:
    """Copy ``rids`` and what they name into ``home``: blobs, then receipts and markers, then rows."""
    new = [r for r in rids if not home.blobs.has(r)]
    fetched = dict(zip(new, _parallel(remote, lambda r: _read_remote_receipt(remote, r), new), strict=True))
    docs = {r: fetched[r][1] if r in fetched else home.receipts.read_document(r) for r in rids}
    wanted: dict[str, str] = {}  # digest -> first receipt naming it
    trees: list[tuple[str, str]] = []
    for rid in new:
        for sha256, is_tree in referenced_blobs(docs[rid]):
            wanted.setdefault(sha256, rid)
            if is_tree:
                trees.append((rid, sha256))
    for (rid, _), entries in zip(trees, _parallel(remote, lambda t: _tree_files(remote, home, t[1]), trees), strict=True):
        for d in entries or []:
            wanted.setdefault(d, rid)
    recheck = load_settings().pulled_receipts == "recheck"
    present = [d for d in wanted if home.blobs.has(d)]
    with stat_cache_use(trust=not recheck):  # recheck: a damaged local copy is fetched again, whatever the stat cache says
        stale = home.blobs.damaged(present) if recheck else []
    todo = [d for d in wanted if not home.blobs.has(d)] + stale
    for d, size in zip(todo, _parallel(remote, lambda d: _fetch(remote, home.blobs, d), todo), strict=True):
        if size is None:
            report.missing_blobs.append((wanted[d], d))
        else:
            report.blobs_copied += 1
            report.bytes_copied += size
    refused = {rid for rid in new if recheck and _refuse(remote, home, rid, docs[rid], fetched, report)}
    for rid in new:
        if rid not in refused:
            home.blobs.put_bytes(fetched[rid][0])
            _add_marker(home, rid)
    report.receipts_seen += len(rids)
    report.receipts_copied += len(new) - len(refused)
    pending = [(r, docs[r]) for r in sorted(rids) if r not in refused]
    for start in range(0, len(pending), BATCH):
        report.catalog_rows_new += home.catalog.ingest(pending[start : start + BATCH], load=home.blobs.get_bytes)


def _refuse(
    remote: S3BlobStore, home: Home, rid: str, doc: dict[str, Any], fetched: dict[str, tuple[bytes, Any]], report: SyncReport
) -> bool:
    """Re-check one pulled receipt in full (``pulled_receipts=recheck``): its parts agree (``stores.consistency``)
    and every object it names that this home holds hashes right. True, with a line in ``report.refused``, when not."""

    def load(sha256: str) -> bytes:
        return fetched[sha256][0] if sha256 in fetched else home.blobs.get_bytes(sha256)

    receipt = validate_document(doc, source=f"receipt {rid} in {remote.url}")
    problems = inconsistencies(receipt, load)
    for sha256, is_tree in referenced_blobs(doc):
        if home.blobs.has(sha256):
            with stat_cache_use(trust=False):
                bad = damaged_objects(home.blobs, sha256, TREE_MEDIA_TYPE if is_tree else "")
            problems += [f"object {b} it names is damaged here and the shared store holds no good copy" for b in bad if home.blobs.has(b)]
    if not problems:
        return False
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    report.refused.append(
        f"receipt {rid} ({doc.get('kind')}) from {remote.url} refused, not indexed: {problems[0]}{more}; "
        "if it is genuine, re-run its stage on the machine that wrote it and push again"
    )
    return True


def ingest_from(remote: S3BlobStore, home: Home, *, full: bool = False) -> SyncReport:
    """Copy the receipts the shared store added since the last pull, and the blobs they name.

    Lists every journal segment (a listing, not a time window: a writer whose clock runs hours ahead
    or behind cannot hide a segment from a later pull), reads the ones not yet applied, and copies
    their receipts; a segment stamped more than ``CLOCK_SKEW_S`` ahead of this machine's clock is
    named in ``clock_skew`` (the writer's clock needs fixing, nothing is lost). The first pull, or ``full=True``, lists every receipt
    marker instead (which also picks up receipts pushed before the journal existed). Receipts are
    verified against their ids and validated; tree subjects bring their files. Blobs the shared
    store lacks are listed in ``missing_blobs`` (the receipt is still indexed, as it would be
    locally). Under ``pulled_receipts=recheck`` (the default) each new receipt is re-checked in
    full first (``_refuse``): one whose parts disagree, or that names an object damaged here and
    in the shared store, goes to ``refused`` and is not stored or indexed. Catalog rows go in last,
    in batches, idempotently.

    Raises:
        ReceiptError: a listed receipt is missing, corrupt JSON or fails its schema.
        DigestMismatchError: a shared object's bytes do not hash to its key.
    """
    report = SyncReport()
    state = SyncState(home, remote)
    cursor = state.cursor()
    listed = remote.journal_after("")
    segments = sorted(set(listed) - state.applied(listed))
    report.clock_skew = skewed(segments, time.time_ns())
    if full or cursor is None:
        rids = remote.receipt_ids()  # after the journal listing: every listed segment's markers are in it
    else:
        named = _parallel(remote, remote.read_journal, segments)
        report.segments_read = len(segments)
        rids = sorted({r for seg in named for r in seg})
    _pull_receipts(remote, home, rids, report)
    state.add_shared(rids)
    state.add_applied(segments, cursor=max(listed, default=None))
    return report


# ---- push -----------------------------------------------------------------------------------------
def _closure(home: Home, rid: str) -> tuple[list[str], list[str]]:
    """(present, missing) local digests a receipt names, tree files included."""
    present: list[str] = []
    missing: list[str] = []
    for sha256, is_tree in referenced_blobs(home.receipts.read_document(rid)):
        digests = [sha256]
        if is_tree and home.blobs.has(sha256):
            digests += _tree_entries(home.blobs.get_bytes(sha256))
        for d in digests:
            (present if home.blobs.has(d) else missing).append(d)
    return present, missing


def _upload(remote: S3BlobStore, home: Home, digests: list[str], report: SyncReport) -> None:
    def put(d: str) -> int:
        remote.put_file(home.blobs.path_of(d), expected_sha256=d, known_absent=True)
        return home.blobs.size_of(d)

    sizes = _parallel(remote, put, digests)
    report.bytes_copied += sum(sizes)


def push_to(home: Home, remote: S3BlobStore, *, full: bool = False) -> SyncReport:
    """Copy the local receipts the shared store lacks, and the blobs they name, into it.

    Candidates are the local receipts this home has not yet pushed or pulled from ``remote``
    (every local receipt with ``full=True``). One bulk listing (``S3BlobStore.existing``) says
    which of their objects the store lacks; those go up in parallel: blobs first, then receipt
    objects, then markers, then one journal segment, so another machine never lists a receipt
    whose blobs are still on the way. Blobs the local store lacks are listed in
    ``missing_blobs``; objects already shared are never rewritten.
    """
    report = SyncReport()
    state = SyncState(home, remote)
    local = list(home.receipts.ids())
    known = set() if full else state.shared()
    todo = [r for r in local if r not in known]
    report.receipts_seen = len(local)
    if not todo:
        return report
    blobs: dict[str, None] = {}
    for rid in todo:
        present, missing = _closure(home, rid)
        blobs.update(dict.fromkeys(present))
        report.missing_blobs += [(rid, d) for d in missing]
    shared = remote.existing([*blobs, *todo])
    receipts = set(todo)
    new_blobs = [d for d in blobs if d not in shared and d not in receipts]
    _upload(remote, home, new_blobs, report)
    report.blobs_copied = len(new_blobs)
    new_receipts = [r for r in todo if r not in shared]
    _upload(remote, home, new_receipts, report)
    report.receipts_copied = len(new_receipts)
    _parallel(remote, remote.mark_receipt, todo)
    own = [remote.append_journal(todo[i : i + SEGMENT_RECEIPTS], now_ns=time.time_ns()) for i in range(0, len(todo), SEGMENT_RECEIPTS)]
    state.add_shared(todo)
    state.add_applied(own)  # this home holds them; the cursor stays where the last pull left it
    return report


# ---- status ---------------------------------------------------------------------------------------
@dataclass
class SyncStatus:
    """Where a home stands with one shared store; ``new_segments`` is None when not asked."""

    store: str
    local_receipts: int
    known_shared: int
    not_pushed: int
    cursor: str | None
    new_segments: int | None = None


def sync_status(home: Home, remote: S3BlobStore, *, ask_remote: bool = True) -> SyncStatus:
    """Counts from the home's sync state; with ``ask_remote`` one listing says how many journal
    segments other machines added since the last pull (what the next pull would read)."""
    state = SyncState(home, remote)
    local = set(home.receipts.ids())
    shared = state.shared()
    cursor = state.cursor()
    new: int | None = None
    if ask_remote:
        listed = remote.journal_after("")
        new = len(set(listed) - state.applied(listed))
    return SyncStatus(
        store=remote.url,
        local_receipts=len(local),
        known_shared=len(local & shared),
        not_pushed=len(local - shared),
        cursor=cursor,
        new_segments=new,
    )
