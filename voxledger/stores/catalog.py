"""The DuckDB catalog: receipts, artifacts, a lineage graph and typed per-stage tables.

The catalog is an index, never the record: every row can be rebuilt from receipts in the store.
DuckDB allows one process per database file when anyone writes, so every connection is taken
under an exclusive file lock; a second process waits up to ``lock_timeout_s`` and then gets a
``CatalogError`` that says who to wait for, never a corrupt file.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from voxledger.schemas.errors import CatalogError, CatalogLockedError
from voxledger.stores.migrations import MIGRATIONS
from voxledger.stores.projections import BlobLoader, project

if TYPE_CHECKING:  # imported where a connection opens: a command that hands its flow off never loads DuckDB
    import duckdb

DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
}


class _Attached:
    """The catalog files attached to this process's in-memory DuckDB, each with its mode and user count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = -1
        self.host: duckdb.DuckDBPyConnection | None = None
        self.files: dict[str, tuple[str, bool, int]] = {}  # path -> (alias, read_only, users)

    def open(self, path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
        """A connection whose default database is ``path``: attached on first use, shared while in use.

        Starting a DuckDB instance costs ~30 ms (``duckdb.connect`` of a file, even of ``:memory:``);
        attaching a file to one kept per process costs a few ms, and every unit of work opens one.
        The file is detached when its last user closes, so another process can open it then, as
        before. After a fork the child starts its own instance (one's threads do not survive it).
        """
        import duckdb

        key = os.path.realpath(path)  # one attachment per file, however it is named
        with self.lock:
            if self.pid != os.getpid() or self.host is None:
                self.pid, self.host, self.files = os.getpid(), duckdb.connect(":memory:", config=DUCKDB_CONFIG), {}
            con = self.host.cursor()
            try:
                if key in self.files:
                    alias, mode, users = self.files[key]
                    if mode and not read_only:
                        raise CatalogError(f"catalog {path} is open read-only in this process; a write cannot share it")
                else:
                    alias, mode, users = "catalog_" + hashlib.sha256(key.encode()).hexdigest()[:16], read_only, 0
                    quoted = key.replace("'", "''")
                    con.execute(f"ATTACH '{quoted}' AS {alias}" + (" (READ_ONLY)" if read_only else ""))
                con.execute(f"USE {alias}")
            except BaseException:
                con.close()
                raise
            self.files[key] = (alias, mode, users + 1)
            return con

    def close(self, path: Path, con: duckdb.DuckDBPyConnection) -> None:
        """Close ``con``; detach ``path`` when it was its last user (this writes the file's checkpoint)."""
        key = os.path.realpath(path)  # one attachment per file, however it is named
        with self.lock:
            try:
                con.close()
            finally:
                if self.pid == os.getpid() and key in self.files and self.host is not None:
                    alias, mode, users = self.files[key]
                    if users > 1:
                        self.files[key] = (alias, mode, users - 1)
                    else:
                        del self.files[key]
                        self.host.execute(f"DETACH {alias}")


_ATTACHED = _Attached()


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
    def connect(
        self, *, read_only: bool = False, sandbox: bool = False, extra_config: dict[str, str] | None = None
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the database under the file lock; migrations are applied on first write.

        A read-only catalog (see ``Home``) is opened without the lock file (it cannot be created
        there, and nothing writes through this handle) and refuses write connections.
        ``sandbox`` (read-only only): no file, network or extension access from SQL, settings
        locked (``stores.sandbox``); ``extra_config`` (limits) is applied before the lock.
        """
        import duckdb

        config = DUCKDB_CONFIG
        if sandbox:
            from voxledger.stores.sandbox import SANDBOX_CONFIG

            read_only, config = True, {**DUCKDB_CONFIG, **(extra_config or {}), **SANDBOX_CONFIG}
        try:
            with self._connection(read_only, config) as con:
                yield con
        except duckdb.Error as exc:
            if _is_corruption(exc):  # a block failing its checksum surfaces at the first read of it
                raise self.damaged(exc) from exc
            raise

    @contextmanager
    def _connection(self, read_only: bool, config: dict[str, str | bool | int | float | list[str]]) -> Iterator[duckdb.DuckDBPyConnection]:
        if self.read_only:
            with self._connect_read_only(write=not read_only, config=config) as con:
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
                self._close(self._open_and_migrate(), DUCKDB_CONFIG)
            con = self._open(read_only, config)
            try:
                if not read_only:
                    self._migrate(con)
                yield con
            finally:
                self._close(con, config)
        finally:
            self.lock.release()

    @contextmanager
    def _connect_read_only(
        self, *, write: bool, config: dict[str, str | bool | int | float | list[str]]
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        if write:
            raise CatalogError(
                f"catalog {self.path} is read-only (its home is not writable, or VOXLEDGER_READ_ONLY is set): "
                "read commands work; record into a writable home"
            )
        if not self.path.is_file():
            raise CatalogError(f"no catalog at {self.path}, and this home is read-only so none can be created; check --home")
        con = self._open(True, config)
        try:
            yield con
        finally:
            self._close(con, config)

    def _open(self, read_only: bool, config: dict[str, str | bool | int | float | list[str]]) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection; a file DuckDB cannot open (a failed checksum, a torn or foreign file)
        becomes one line pointing at ``voxledger catalog rebuild``, which re-derives it from the store."""
        import duckdb

        try:
            if config is DUCKDB_CONFIG:
                return _ATTACHED.open(self.path, read_only)
            return duckdb.connect(str(self.path), read_only=read_only, config=config)  # the sandbox's locked-down instance
        except duckdb.Error as exc:
            if "could not set lock" in str(exc).lower():  # another program (the duckdb shell, say) holds the file
                raise CatalogError(f"catalog {self.path} is held by another program ({_excerpt(exc)}); close it and retry") from exc
            raise self.damaged(exc) from exc

    def _close(self, con: duckdb.DuckDBPyConnection, config: dict[str, str | bool | int | float | list[str]]) -> None:
        if config is DUCKDB_CONFIG:
            _ATTACHED.close(self.path, con)
        else:
            con.close()

    def damaged(self, exc: BaseException) -> CatalogError:
        """The one-line error for a catalog file DuckDB cannot read, pointing at the rebuild."""
        return CatalogError(
            f"catalog {self.path} cannot be read ({_excerpt(exc)}); it is an index of the store: "
            "`voxledger catalog rebuild` re-creates it from the receipts (in a read-only home, rebuild a writable copy)"
        )

    def _open_and_migrate(self) -> duckdb.DuckDBPyConnection:
        con = self._open(False, DUCKDB_CONFIG)
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

    def ingest(
        self, items: Iterable[tuple[str, dict[str, Any]]], load: BlobLoader | None = None, unprojected: list[str] | None = None
    ) -> int:
        """Index receipts (id, validated document) idempotently; return how many were new.

        ``unprojected``: see ``_rows_for`` (a rebuild passes a list and reports what it holds).
        """
        batch = list(items)
        if not batch:
            return 0
        tables = _rows_for(batch, load, unprojected)
        with self.connect() as con:
            before = con.execute("SELECT count(*) FROM receipts").fetchone()[0]  # type: ignore[index]
            con.execute("BEGIN")
            _insert_rows(con, {table: rows for table, rows in tables.items() if rows})
            _write_sums(con)
            con.execute("COMMIT")
            after = con.execute("SELECT count(*) FROM receipts").fetchone()[0]  # type: ignore[index]
        return int(after - before)

    def check_sums(self, con: duckdb.DuckDBPyConnection) -> None:
        """Compare the lineage tables with the sums the last ingest wrote beside them; raise
        CatalogError when they differ (a rewrite the file's own block checksums did not catch)."""
        import duckdb

        stored = {
            r[0]: (r[1], r[2], r[3]) for r in con.execute("SELECT name, row_count, digest, duckdb_version FROM catalog_sums").fetchall()
        }
        for name, (count, digest) in _sums(con).items():
            if name not in stored or stored[name][2] != duckdb.__version__:
                continue  # written before sums existed, or by another DuckDB (whose hash may differ): the next ingest rewrites them
            if stored[name][:2] != (count, digest):
                raise CatalogError(
                    f"catalog {self.path}: table {name} no longer matches the sums its last write recorded "
                    f"({count} rows, {stored[name][0]} recorded): it was changed outside voxledger or damaged; "
                    "`voxledger catalog rebuild` re-derives it from the store"
                )


SUMMED = {
    "receipts": "receipt_sha256, kind, status, cache_key",
    "edges": "src, dst, role, direction, src_ref",
    "artifacts": "sha256, size_bytes, media_type",
}
"""The index tables lineage answers rest on, and the columns summed (an order-free digest: the sum of
DuckDB's 64-bit row hashes). A receipt's document is left out: ``store verify`` compares those."""


def _sums(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, int]]:
    out = {}
    for table, cols in SUMMED.items():
        row = con.execute(f"SELECT count(*), coalesce(sum(hash({cols})::HUGEINT), 0) FROM {table}").fetchone()
        out[table] = (int(row[0]), int(row[1])) if row else (0, 0)
    return out


def _write_sums(con: duckdb.DuckDBPyConnection) -> None:
    import duckdb

    for table, (count, digest) in _sums(con).items():
        con.execute("INSERT OR REPLACE INTO catalog_sums VALUES (?, ?, ?, ?)", [table, count, digest, duckdb.__version__])


def _excerpt(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_corruption(exc: BaseException) -> bool:
    """Whether a DuckDB error says the file's bytes are damaged (not that a query is wrong)."""
    text = str(exc)
    return "Corrupt database file" in text or "checksum" in text.lower() or text.startswith("INTERNAL Error")


def _insert_rows(con: duckdb.DuckDBPyConnection, tables: dict[str, list[dict[str, Any]]]) -> None:
    """``INSERT OR IGNORE`` each table's rows with one statement: every column is bound as one list
    cast to the column's own type and unnested (``voxledger bench --only catalog`` times it against
    ``executemany``, which executes the statement once per row at ~5 ms a row). Rows with the key of
    an earlier row, in the table or in this batch, are ignored, as one ``INSERT`` per row would."""
    if not tables:
        return
    found = con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE database_name = current_database() AND schema_name = current_schema() AND list_contains(?, table_name)",
        [list(tables)],
    ).fetchall()
    types: dict[str, dict[str, str]] = {}
    for table, column, data_type in found:
        types.setdefault(table, {})[column] = data_type
    for table, rows in tables.items():
        names = list(dict.fromkeys(name for row in rows for name in row))
        unknown = [n for n in names if n not in types.get(table, {})]
        if unknown:
            raise CatalogError(f"catalog table {table!r} has no column(s) {', '.join(unknown)}: the catalog predates this code's schema")
        columns = ", ".join(names)
        unnested = ", ".join(f"unnest(?::{types[table][n]}[])" for n in names)
        con.execute(f"INSERT OR IGNORE INTO {table} ({columns}) SELECT {unnested}", [[row.get(n) for row in rows] for n in names])


def core_rows(rid: str, doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The ``receipts``, ``artifacts`` and ``edges`` rows one receipt document stands for."""
    receipt = {
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
    artifacts, edges = [], []
    for a in doc["subjects"]:
        artifacts.append({"sha256": a["sha256"], "size_bytes": a["size_bytes"], "media_type": a["media_type"]})
        edges.append({"src": rid, "dst": a["sha256"], "role": a["role"], "direction": "output", "src_ref": "receipt"})
    for i in doc["inputs"]:
        edges.append({"src": i["sha256"], "dst": rid, "role": i["role"], "direction": "input", "src_ref": i["ref"]})
    return {"receipts": [receipt], "artifacts": artifacts, "edges": edges}


def _rows_for(
    batch: list[tuple[str, dict[str, Any]]], load: BlobLoader | None = None, unprojected: list[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Turn receipt documents into rows for the core tables and any typed projections.

    With ``unprojected`` (a rebuild), a receipt whose typed rows need an output blob that is
    missing or damaged keeps its core rows and is listed there instead of failing the batch.
    """
    from voxledger.schemas.errors import BlobMissingError, DigestMismatchError

    tables: dict[str, list[dict[str, Any]]] = {"receipts": [], "artifacts": [], "edges": []}
    for rid, doc in batch:
        for table, rows in core_rows(rid, doc).items():
            tables[table].extend(rows)
        try:
            projected = project(rid, doc, load)
        except (BlobMissingError, DigestMismatchError):
            if unprojected is None:
                raise
            unprojected.append(rid)
            continue
        for table, rows in projected.items():
            tables.setdefault(table, []).extend(rows)
    return tables
