"""Catalog: migrations, idempotent ingest, rebuild from the store, lineage, one writer at a time."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.factories import hexd, ingest_receipt, record_synthetic
from voxledger.schemas.base import InputRef
from voxledger.schemas.errors import CatalogError
from voxledger.stores.catalog import Catalog
from voxledger.stores.home import Home
from voxledger.stores.lineage import resolve_node, walk
from voxledger.stores.migrations import MIGRATIONS

TABLES = ["receipts", "artifacts", "edges", "alias_history"]


def _dump(home: Home) -> dict[str, list[tuple]]:  # type: ignore[type-arg]
    with home.catalog.connect(read_only=True) as con:
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}


def _chain(home: Home, n: int) -> list[str]:
    """A chain of receipts where receipt i reads the output of receipt i-1."""
    ids = []
    for i in range(1, n + 1):
        inputs = (InputRef(role="source", sha256=hexd(i - 1), ref="artifact"),) if i > 1 else ()
        ids.append(record_synthetic(home, ingest_receipt(i, inputs=inputs))[0])
    return ids


def test_migrations_are_recorded_in_order(home: Home) -> None:
    assert home.catalog.migrations() == [name for name, _ in MIGRATIONS]


def test_ingest_is_idempotent(home: Home) -> None:
    r = ingest_receipt(1)
    record_synthetic(home, r)
    before = _dump(home)
    record_synthetic(home, r)
    record_synthetic(home, r, r)
    assert _dump(home) == before
    assert len(before["receipts"]) == 1


def test_rebuild_from_store_yields_the_same_rows(home: Home) -> None:
    _chain(home, 12)
    before = _dump(home)
    home.catalog.path.unlink()
    assert home.rebuild_catalog() == 12
    assert _dump(home) == before


def test_lineage_up_and_down(home: Home) -> None:
    ids = _chain(home, 6)
    with home.catalog.connect(read_only=True) as con:
        up = walk(con, hexd(6), "up", depth=20)
        down = walk(con, hexd(1), "down", depth=20)
        shallow = walk(con, hexd(6), "up", depth=2)
        assert resolve_node(con, ids[2][:10]) == ids[2]
        with pytest.raises(CatalogError, match="at least 8"):
            resolve_node(con, "abc")
    assert {e.src for e in up} >= set(ids)  # every receipt in the chain produced an ancestor
    assert {e.dst for e in down} >= set(ids[1:])
    assert max(e.depth for e in shallow) == 2


HOLDER = """
import sys, time
from pathlib import Path
from voxledger.stores.catalog import Catalog
cat = Catalog(Path(sys.argv[1]))
with cat.connect():
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_second_writer_waits_then_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "c.duckdb"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), "3"], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"holding"
    with pytest.raises(CatalogError, match="locked by another voxledger process"):
        with Catalog(path, lock_timeout_s=0.5).connect():
            pass
    start = time.monotonic()
    with Catalog(path, lock_timeout_s=30).connect() as con:  # waits its turn, then works
        assert con.execute("SELECT count(*) FROM receipts").fetchone() == (0,)
    assert time.monotonic() - start > 0.5
    proc.wait()


INGESTER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from tests.factories import ingest_receipt, record_synthetic
from voxledger.stores.home import Home
home = Home(Path(sys.argv[1]))
k = int(sys.argv[2])
for i in range(20):
    record_synthetic(home, ingest_receipt(1000 * k + i))
"""


def test_four_processes_record_receipts_concurrently(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])
    procs = [subprocess.Popen([sys.executable, "-c", INGESTER, str(tmp_path / "h"), str(k), root]) for k in range(4)]
    assert [p.wait() for p in procs] == [0, 0, 0, 0]
    home = Home(tmp_path / "h")
    assert len(_dump(home)["receipts"]) == 80
    assert len(list(home.receipts.ids())) == 80


def test_one_statement_per_table_keeps_the_first_row_of_a_key_and_names_a_missing_column(home: Home) -> None:
    from voxledger.stores.catalog import _insert_rows

    record_synthetic(home, ingest_receipt(1))
    rows = [{"sha256": hexd(7), "size_bytes": 5, "media_type": "audio/wav"}, {"sha256": hexd(7), "size_bytes": 9, "media_type": "x/y"}]
    with home.catalog.connect() as con:
        _insert_rows(con, {"artifacts": [*rows, {"sha256": hexd(8), "size_bytes": 3, "media_type": "a/b"}]})
        got = con.execute(
            "SELECT sha256, size_bytes, media_type FROM artifacts WHERE sha256 IN (?, ?) ORDER BY sha256", [hexd(7), hexd(8)]
        ).fetchall()
        assert got == [(hexd(7), 5, "audio/wav"), (hexd(8), 3, "a/b")]  # the first row of a key, as one INSERT per row keeps it
        _insert_rows(con, {"artifacts": [{"sha256": hexd(7), "size_bytes": 11, "media_type": "z/z"}]})  # a key the table holds
        assert con.execute("SELECT size_bytes, media_type FROM artifacts WHERE sha256 = ?", [hexd(7)]).fetchall() == [(5, "audio/wav")]
        with pytest.raises(CatalogError, match="catalog table 'artifacts' has no column.s. colour"):
            _insert_rows(con, {"artifacts": [{"sha256": hexd(9), "size_bytes": 1, "media_type": "a/b", "colour": "red"}]})


def test_a_rebuild_behind_a_held_lock_ends_in_one_clean_line(tmp_path: Path) -> None:
    """A lock holder that never lets go (SIGSTOPped, say): `catalog rebuild` said 'unexpected Timeout (a defect)'."""
    from filelock import FileLock

    from voxledger.schemas.errors import CatalogLockedError
    from voxledger.stores.home import Home

    home = Home(tmp_path / "h", lock_timeout_s=0.2)
    with home.catalog.connect() as con:
        con.execute("SELECT 1")
    holder = FileLock(str(home.catalog.path) + ".lock")
    with holder.acquire(), pytest.raises(CatalogLockedError, match="locked by another voxledger process.*--lock-timeout"):
        # filelock is reentrant within one process for the same object only: a second FileLock object still waits
        home.rebuild()
