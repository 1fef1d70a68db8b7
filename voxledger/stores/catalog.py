"""The DuckDB catalog: receipts, artifacts, a lineage graph and typed per-stage tables.

The catalog is an index, never the record: every row can be rebuilt from receipts in the store.
DuckDB allows one process per database file when anyone writes, so every connection is taken
under an exclusive file lock; a second process waits up to ``lock_timeout_s`` and then gets a
``CatalogError`` that says who to wait for, never a corrupt file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
from filelock import FileLock, Timeout

from voxledger.schemas.errors import CatalogError, CatalogLockedError
from voxledger.stores.migrations import MIGRATIONS
from voxledger.stores.projections import BlobLoader, project

DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
}


class Catalog:
    """A handle on the catalog file; use ``with catalog.connect() as con`` for each unit of work."""

    def __init__(self, path: Path, *, lock_timeout_s: float = 60.0, read_only: bool = False) -> None:
        self.path = path
        self.lock = FileLock(str(path) + ".lock")
        self.lock_timeout_s = lock_timeout_s
        self.read_only = read_only
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the database under the file lock; migrations are applied on first write.

        A read-only catalog (see ``Home``) is opened without the lock file (it cannot be created
        there, and nothing writes through this handle) and refuses write connections.
        """
        if self.read_only:
            with self._connect_read_only(write=not read_only) as con:
                yield con
            return
        try:
            self.lock.acquire(timeout=self.lock_timeout_s)
        except Timeout as exc:
            raise CatalogLockedError(
                f"catalog {self.path} is locked by another voxledger process for more than "
                f"{self.lock_timeout_s:g} s; wait for it to finish or raise --lock-timeout"
            ) from exc
        try:
            if read_only and not self.path.exists():
                self._open_and_migrate().close()
            con = duckdb.connect(str(self.path), read_only=read_only, config=DUCKDB_CONFIG)
            try:
                if not read_only:
                    self._migrate(con)
                yield con
            finally:
                con.close()
        finally:
            self.lock.release()

    @contextmanager
    def _connect_read_only(self, *, write: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        if write:
            raise CatalogError(
                f"catalog {self.path} is read-only (its home is not writable, or VOXLEDGER_READ_ONLY is set): "
                "read commands work; record into a writable home"
            )
        if not self.path.is_file():
            raise CatalogError(f"no catalog at {self.path}, and this home is read-only so none can be created; check --home")
        try:
            con = duckdb.connect(str(self.path), read_only=True, config=DUCKDB_CONFIG)
        except duckdb.Error as exc:
            raise CatalogError(f"cannot open read-only catalog {self.path}: {exc}") from exc
        try:
            yield con
        finally:
            con.close()

    def _open_and_migrate(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(str(self.path), config=DUCKDB_CONFIG)
        self._migrate(con)
        return con

    @staticmethod
    def _migrate(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)")
        done = {r[0] for r in con.execute("SELECT name FROM schema_migrations").fetchall()}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            con.execute("BEGIN")
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, now())", [name])
            con.execute("COMMIT")

    def migrations(self) -> list[str]:
        """Names of applied migrations, in order."""
        with self.connect() as con:
            return [r[0] for r in con.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()]

    def ingest(self, items: Iterable[tuple[str, dict[str, Any]]], load: BlobLoader | None = None) -> int:
        """Index receipts (id, validated document) idempotently; return how many were new."""
        batch = list(items)
        if not batch:
            return 0
        tables = _rows_for(batch, load)
        with self.connect() as con:
            before = con.execute("SELECT count(*) FROM receipts").fetchone()[0]  # type: ignore[index]
            con.execute("BEGIN")
            for table, rows in tables.items():
                if rows and len(rows) <= SMALL_BATCH_ROWS:  # bound parameters: no Arrow (whose conversion imports pandas)
                    names = list(rows[0])
                    cols, marks = ", ".join(names), ", ".join("?" * len(names))
                    con.executemany(f"INSERT OR IGNORE INTO {table} ({cols}) VALUES ({marks})", [[r.get(n) for n in names] for r in rows])
                elif rows:
                    import pyarrow as pa  # only for large batches: importing it costs a quarter second

                    arrow = pa.Table.from_pylist(rows)
                    con.register("incoming", arrow)
                    cols = ", ".join(arrow.column_names)
                    con.execute(f"INSERT OR IGNORE INTO {table} ({cols}) SELECT {cols} FROM incoming")
                    con.unregister("incoming")
            con.execute("COMMIT")
            after = con.execute("SELECT count(*) FROM receipts").fetchone()[0]  # type: ignore[index]
        return int(after - before)


SMALL_BATCH_ROWS = 64
"""Up to this many rows per table go in as bound parameters; more go in as one Arrow table."""


def _rows_for(batch: list[tuple[str, dict[str, Any]]], load: BlobLoader | None = None) -> dict[str, list[dict[str, Any]]]:
    """Turn receipt documents into rows for the core tables and any typed projections."""
    tables: dict[str, list[dict[str, Any]]] = {"receipts": [], "artifacts": [], "edges": []}
    for rid, doc in batch:
        tables["receipts"].append(
            {
                "receipt_sha256": rid,
                "kind": doc["kind"],
                "schema_version": doc["schema_version"],
                "flow": doc["producer"]["flow"],
                "task": doc["producer"]["task"],
                "status": doc["status"],
                "started_at": datetime.fromisoformat(doc["started_at"]),
                "finished_at": datetime.fromisoformat(doc["finished_at"]),
                "cache_key": doc.get("cache_key"),
                "doc": json.dumps(doc, sort_keys=True),
            }
        )
        for a in doc["subjects"]:
            tables["artifacts"].append({"sha256": a["sha256"], "size_bytes": a["size_bytes"], "media_type": a["media_type"]})
            tables["edges"].append({"src": rid, "dst": a["sha256"], "role": a["role"], "direction": "output", "src_ref": "receipt"})
        for i in doc["inputs"]:
            tables["edges"].append({"src": i["sha256"], "dst": rid, "role": i["role"], "direction": "input", "src_ref": i["ref"]})
        for table, rows in project(rid, doc, load).items():
            tables.setdefault(table, []).extend(rows)
    return tables
