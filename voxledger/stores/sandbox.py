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

import threading
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

    The query is bounded (settings ``query_timeout_s``, ``query_memory_mib``, ``query_max_rows``):
    it holds the catalog's lock while it runs, so one that would run or grow without end
    (``range(1e14)``, ``repeat('x', 3e9)``) is stopped, never left holding the home.

    Raises CatalogError (one line) for anything but a single SELECT/EXPLAIN, for SQL that is not
    UTF-8 text, and for a query that fails, runs past a limit or tries to reach files, the network
    or extensions.
    """
    from voxledger.settings import load_settings

    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CatalogError(f"query is not UTF-8 text (character {exc.start}); type it again or pass it from a UTF-8 file") from None
    settings = load_settings()
    kind = statement_kind(sql)
    if kind not in ALLOWED:
        word = sql.split(None, 1)[0].upper().strip(";")
        raise CatalogError(
            f"query refused: {word if word.isalpha() else kind} statements are not allowed; `voxledger query` runs one read-only SELECT "
            "(SHOW, DESCRIBE, SUMMARIZE and EXPLAIN too) against the catalog, with no file, network or extension access"
        )
    limits = {"memory_limit": f"{settings.query_memory_mib}MiB", "max_temp_directory_size": "0KiB"}
    with catalog.connect(read_only=True, sandbox=True, extra_config=limits) as con:
        timer = threading.Timer(settings.query_timeout_s, con.interrupt)
        timer.start()
        try:
            cur = con.execute(sql)
            rows = cur.fetchmany(settings.query_max_rows + 1)
        except duckdb.PermissionException as exc:
            raise CatalogError(
                f"query refused: the catalog sandbox has no file, network or extension access ({_one_line(str(exc))})"
            ) from exc
        except duckdb.InterruptException as exc:
            raise CatalogError(
                f"query stopped after {settings.query_timeout_s:g} s (it holds the catalog's lock while it runs); "
                "narrow it, or raise VOXLEDGER_QUERY_TIMEOUT_S"
            ) from exc
        except duckdb.OutOfMemoryException as exc:
            raise CatalogError(
                f"query needs more than {settings.query_memory_mib} MiB ({_one_line(str(exc), 100)}); narrow it, or raise VOXLEDGER_QUERY_MEMORY_MIB"
            ) from exc
        except duckdb.Error as exc:
            raise CatalogError(f"query failed: {_one_line(str(exc))}") from exc
        finally:
            timer.cancel()
        if cur.description is None:
            raise CatalogError("query returned no result set; use SELECT, SHOW or DESCRIBE")
        if len(rows) > settings.query_max_rows:
            raise CatalogError(f"query returns more than {settings.query_max_rows:,} rows; add LIMIT, or raise VOXLEDGER_QUERY_MAX_ROWS")
        return [d[0] for d in cur.description], rows
