"""The voxledger home: one directory holding the blob store, receipt markers and the catalog.

Resolution order: an explicit path (``--home``), then ``VOXLEDGER_HOME``, then ``./.voxledger``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from voxledger.schemas.base import ReceiptBase
from voxledger.settings import load_settings
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.catalog import Catalog
from voxledger.stores.hashing import StatCache
from voxledger.stores.memo import DerivedMemo
from voxledger.stores.receipts import ReceiptStore


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where the home lives, following the documented resolution order."""
    if explicit:
        return Path(explicit).absolute()
    env = load_settings().home
    return Path(env).absolute() if env else Path.cwd() / ".voxledger"


READ_ONLY_ENV = "VOXLEDGER_READ_ONLY"


def is_read_only(root: Path) -> bool:
    """True when ``VOXLEDGER_READ_ONLY`` is true (see docs/settings.md), or the home or its catalog exists and
    this process may not write it (a shared catalog mounted read-only, say).

    The variable exists because file permissions cannot say it for every caller (root writes
    anything) and a read-only mount may still report a directory as writable to ``access``.
    """
    if load_settings().read_only:
        return True
    catalog = root / "catalog.duckdb"
    return (root.is_dir() and not os.access(root, os.W_OK)) or (catalog.is_file() and not os.access(catalog, os.W_OK))


class HomeRef(BaseModel):
    """How a flow finds and opens its home: the typed reference every flow takes instead of a path
    string, so the caller's lock timeout and read-only choice reach every stage (and a worker).

    ``root`` None resolves on the machine that opens it (``VOXLEDGER_HOME``, else ``./.voxledger``):
    a deployment for a shared store leaves it unset so each worker uses its own local home.
    ``shared_store`` None means: as this process's environment says (``VOXLEDGER_SYNC``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    root: str | None = None
    lock_timeout_s: float = Field(default=60.0, gt=0, description="seconds to wait for another process holding the catalog")
    read_only: bool | None = Field(default=None, description="None: decided from the file system and VOXLEDGER_READ_ONLY")
    shared_store: bool | None = Field(default=None, description="pull before and push after each stage; None: VOXLEDGER_SYNC")

    @classmethod
    def of(cls, home: HomeRef | Home | str | os.PathLike[str] | None) -> HomeRef:
        """A reference from a reference, an open home, or a bare path (default settings)."""
        if isinstance(home, HomeRef):
            return home
        if isinstance(home, Home):
            return cls(root=str(home.root), lock_timeout_s=home.catalog.lock_timeout_s, read_only=home.read_only)
        return cls(root=str(home) if home else None)

    def open(self) -> Home:
        """The home this reference names, with its lock timeout and read-only setting."""
        return Home(self.root, lock_timeout_s=self.lock_timeout_s, read_only=self.read_only)


class Home:
    """Store + receipts + catalog + stat cache under one root."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *, lock_timeout_s: float = 60.0, read_only: bool | None = None) -> None:
        self.root = resolve_home(root)
        self.read_only = is_read_only(self.root) if read_only is None else read_only
        self.stat_cache = StatCache(self.root / "cache" / "stat-cache.sqlite", read_only=self.read_only)
        self.blobs = LocalBlobStore(self.root / "store", verified=self.stat_cache)
        self.receipts = ReceiptStore(self.blobs)
        self.catalog = Catalog(self.root / "catalog.duckdb", lock_timeout_s=lock_timeout_s, read_only=self.read_only)
        self._memo: DerivedMemo | None = None

    @property
    def memo(self) -> DerivedMemo:
        """This home's memo of derived values (`voxledger.stores.memo`), opened on first use."""
        if self._memo is None:
            self._memo = DerivedMemo(self.root / "cache" / "derived.sqlite", self.blobs, read_only=self.read_only)
        return self._memo

    def check_subjects(self, receipt: ReceiptBase) -> None:
        """Refuse a receipt that names an output whose bytes are missing or damaged.

        Raises DigestMismatchError naming the role, the digest and the fix.
        """
        from voxledger.schemas.errors import DigestMismatchError
        from voxledger.stores.trees import damaged_objects

        for subject in receipt.subjects:
            bad = damaged_objects(self.blobs, subject.sha256, subject.media_type)
            if bad:
                raise DigestMismatchError(
                    f"{receipt.kind} receipt not recorded: its output {subject.role!r} ({subject.sha256}) "  # type: ignore[attr-defined]
                    f"has {len(bad)} missing or damaged object(s), e.g. {bad[0]}; re-run the stage to regenerate it"
                )

    @contextmanager
    def pipeline_slot(self) -> Iterator[None]:
        """Hold this home's one pipeline slot for a block; HomeBusyError at once when another run holds it.

        Overlapping pipelines on one home would run the same stages side by side (a schedule whose
        run outlasts its interval, two workers on one home): the later one stops before any work,
        naming the holder. The lock is released when the holder exits, however it exits.
        """
        from filelock import FileLock, Timeout

        from voxledger.schemas.errors import HomeBusyError

        self.require_writable()
        self.root.mkdir(parents=True, exist_ok=True)
        holder = self.root / "pipeline.holder"
        lock = FileLock(str(self.root / "pipeline.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout as exc:
            who = holder.read_text(encoding="utf-8").strip() if holder.is_file() else "another process"
            raise HomeBusyError(
                f"another pipeline run holds home {self.root} ({who}); this run is skipped so the two do not race on "
                "the same stages: wait for it to end (deployments allow one run at a time and cancel the rest)"
            ) from exc
        try:
            holder.write_text(f"pid {os.getpid()} since {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}\n", encoding="utf-8")
            yield
        finally:
            holder.unlink(missing_ok=True)
            lock.release()

    def require_writable(self) -> None:
        """Raise CatalogError before anything is written when this home is read-only."""
        if self.read_only:
            from voxledger.schemas.errors import CatalogError

            raise CatalogError(
                f"home {self.root} is read-only (not writable by this user, or {READ_ONLY_ENV} is set): "
                "read commands (query, lineage, store verify, dashboard, ...) work; record into a writable home"
            )

    def record(self, receipt: ReceiptBase) -> str:
        """Commit a receipt: outputs checked, blob, marker, then catalog rows (the commit point)."""
        self.require_writable()
        self.check_subjects(receipt)
        rid, doc = self.receipts.write(receipt)
        self.catalog.ingest([(rid, doc)], self.blobs.get_bytes)
        return rid

    def record_many(self, receipts: list[ReceiptBase]) -> list[str]:
        """Commit many receipts with one catalog transaction."""
        self.require_writable()
        for r in receipts:
            self.check_subjects(r)
        written = [self.receipts.write(r) for r in receipts]
        self.catalog.ingest(written, self.blobs.get_bytes)
        return [rid for rid, _ in written]

    def find_cached(self, cache_key: str) -> str | None:
        """Id of the newest succeeded receipt the catalog lists under this cache key whose own
        bytes (verified against its id) record that key and success; None if there is none."""
        from voxledger.schemas.errors import VoxledgerError

        for rid in self.cached_candidates(cache_key):
            try:
                doc = self.receipts.read_document(rid)
            except VoxledgerError:  # missing, damaged or no longer valid: not a hit
                continue
            if doc.get("cache_key") == cache_key and doc.get("status") == "succeeded":
                return rid
        return None

    def cached_candidates(self, cache_key: str, limit: int = 8) -> list[str]:
        """Ids of succeeded receipts the catalog lists under this cache key, newest first.

        Candidates only: the catalog is an index, so a caller serving one checks that the receipt
        itself records the key (``tasks.stage.reuse``)."""
        with self.catalog.connect() as con:
            rows = con.execute(
                "SELECT receipt_sha256 FROM receipts WHERE cache_key = ? AND status = 'succeeded' ORDER BY finished_at DESC LIMIT ?",
                [cache_key, limit],
            ).fetchall()
        return [r[0] for r in rows]

    def rebuild_catalog(self) -> int:
        """Recreate the catalog from the store alone; return the number of receipts indexed."""
        return self.rebuild().indexed

    def rebuild(self) -> RebuildReport:
        """Recreate the catalog from the store alone, never failing on one damaged receipt.

        A receipt whose own object is missing or does not hash to its id (quarantined, say) is
        left out and listed; one whose typed rows need an output blob that is gone keeps its
        core rows (receipt, artifacts, lineage edges) and is listed as unprojected.
        """
        from filelock import Timeout

        from voxledger.schemas.errors import CatalogLockedError, VoxledgerError

        self.require_writable()
        tmp = self.catalog.path.with_name(self.catalog.path.name + ".rebuild")
        # the lock is held throughout: a receipt committed while the store is read would be lost by the replace
        try:
            held = self.catalog.lock.acquire(timeout=self.catalog.lock_timeout_s)
        except Timeout as exc:
            raise CatalogLockedError(
                f"catalog {self.catalog.path} is locked by another voxledger process for more than {self.catalog.lock_timeout_s:g} s "
                "(a stopped or hung process keeps it: find it with `fuser` on the .lock file); wait for it or raise --lock-timeout"
            ) from exc
        with held:
            tmp.unlink(missing_ok=True)
            fresh = Catalog(tmp)
            docs: list[tuple[str, dict[str, Any]]] = []
            skipped: list[tuple[str, str]] = []
            for rid in self.receipts.ids():
                try:
                    docs.append((rid, self.receipts.read_document(rid)))
                except VoxledgerError as exc:
                    skipped.append((rid, str(exc).split("\n", 1)[0]))
            unprojected: list[str] = []
            for start in range(0, len(docs), 5000):
                fresh.ingest(docs[start : start + 5000], self.blobs.get_bytes, unprojected)
            os.replace(tmp, self.catalog.path)
        Path(str(tmp) + ".lock").unlink(missing_ok=True)
        return RebuildReport(len(docs), tuple(skipped), tuple(unprojected))


@dataclass(frozen=True)
class RebuildReport:
    """What a catalog rebuild indexed and what it had to leave out (never silently)."""

    indexed: int
    skipped: tuple[tuple[str, str], ...]  # (receipt id, why): its own bytes are missing or damaged
    unprojected: tuple[str, ...]  # indexed without typed rows: an output blob they are read from is gone
