"""``voxledger query``: a user's SQL run against the catalog in a sandbox that cannot touch the machine.

Two fences, each enough alone for the escapes tested in ``tests/stores/test_sandbox.py``:

- the statement is parsed first and only one ``SELECT`` (``SHOW``, ``DESCRIBE`` and ``SUMMARIZE``
  parse as one) or ``EXPLAIN`` runs: ``COPY``, ``EXPORT``, ``INSTALL``, ``LOAD``, ``ATTACH``,
  ``PRAGMA``, ``SET``, ``CALL``, DDL and DML are refused before DuckDB executes anything;
- the connection is read-only and opened with ``enable_external_access=false`` (no file or
  network reads from SQL: ``read_text``, ``read_csv``, ``glob``, URLs), extension install and
  autoload off, community extensions off, and the configuration locked so SQL cannot undo it.
"""

from __future__ import annotations

from typing import Any

import duckdb

from voxledger.schemas.errors import CatalogError
from voxledger.stores.catalog import Catalog

SANDBOX_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": "false",
    "allow_community_extensions": "false",
    "lock_configuration": "true",
}
"""Added to the catalog's own connection settings for a user's query (applied in this order:
``lock_configuration`` last, or DuckDB would refuse the rest)."""

ALLOWED = {"SELECT", "EXPLAIN"}
EXCERPT_CHARS = 160


def _one_line(text: str, limit: int = EXCERPT_CHARS) -> str:
    line = " ".join(text.split("LINE 1:", 1)[0].split())  # DuckDB's caret excerpt repeats the query
    return line if len(line) <= limit else line[: limit - 3] + "..."


def statement_kind(sql: str) -> str:
    """The one statement type of ``sql`` (``SELECT``, ``COPY``, ...); CatalogError when it does not
    parse or holds more or fewer than one statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise CatalogError(f"query does not parse: {_one_line(str(exc))}") from exc
    if len(statements) != 1:
        raise CatalogError(f"query refused: give exactly one statement (got {len(statements)}); run them one at a time")
    return str(statements[0].type).rsplit(".", 1)[-1]


def run_query(catalog: Catalog, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only query; return (column names, rows).

    Raises CatalogError (one line) for anything but a single SELECT/EXPLAIN, and for a query that
    fails or tries to reach files, the network or extensions.
    """
    kind = statement_kind(sql)
    if kind not in ALLOWED:
        word = sql.split(None, 1)[0].upper().strip(";")
        raise CatalogError(
            f"query refused: {word if word.isalpha() else kind} statements are not allowed; `voxledger query` runs one read-only SELECT "
            "(SHOW, DESCRIBE, SUMMARIZE and EXPLAIN too) against the catalog, with no file, network or extension access"
        )
    with catalog.connect(read_only=True, sandbox=True) as con:
        try:
            cur = con.execute(sql)
            rows = cur.fetchall()
        except duckdb.PermissionException as exc:
            raise CatalogError(
                f"query refused: the catalog sandbox has no file, network or extension access ({_one_line(str(exc))})"
            ) from exc
        except duckdb.Error as exc:
            raise CatalogError(f"query failed: {_one_line(str(exc))}") from exc
        if cur.description is None:
            raise CatalogError("query returned no result set; use SELECT, SHOW or DESCRIBE")
        return [d[0] for d in cur.description], rows
