"""SQLite reads of a Prefect server's database, for the template new homes start from (``hosting/server.py``).

Only two questions are asked of such a file: a consistent copy of it (``VACUUM INTO``, from a
read-only connection that never creates a database), and whether it holds anything beyond
Prefect's schema (``schema_only``): a template must never carry one home's run history into another.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

# tables a database template may hold rows in: Alembic's revision and what Prefect registers at start-up
TEMPLATE_TABLES = frozenset({"alembic_version", "block_type", "block_schema", "block_schema_reference"})

Error = sqlite3.Error


def _read_only(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)


def schema_only(db: Path) -> bool:
    """Whether ``db`` holds Alembic's revision and no row outside ``TEMPLATE_TABLES`` (no run history)."""
    with closing(_read_only(db)) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        filled = {t for t in tables if con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() is not None}  # noqa: S608
    return "alembic_version" in filled and filled <= TEMPLATE_TABLES


def copy_database(src: Path, dest: Path) -> None:
    """A consistent copy of ``src`` (a live server's database: its WAL included) written to ``dest``."""
    with closing(_read_only(src)) as con:
        con.execute("VACUUM INTO ?", (str(dest),))
