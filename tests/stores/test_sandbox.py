"""`voxledger query` cannot touch the machine: every known escape is refused with one line, and
nothing outside the catalog is read, written or fetched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from tests.factories import ingest_receipt
from voxledger.cli import main
from voxledger.stores.home import Home


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sandbox")
    home = Home(root / "home")
    out = home.blobs.put_bytes(b"an output")
    home.record(ingest_receipt(1, out=out))
    plan = root / "plan.yaml"
    plan.write_text("name: keep-me\n")
    secret = root / "secret.txt"
    secret.write_text("top secret contents\n")
    return {"root": root, "home": home.root, "plan": plan, "secret": secret}


def _query(world: dict[str, Path], sql: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--home", str(world["home"]), "query", sql])
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        out += f"\nTraceback (escaped the CLI): {result.exception!r}"
    return result.exit_code, out


ESCAPES = [
    "COPY receipts TO '{root}/stolen.csv'",
    "COPY (SELECT 'pwned') TO '{plan}' (FORMAT csv, HEADER false)",
    "EXPORT DATABASE '{root}/export'",
    "SELECT * FROM read_text('/etc/shadow')",
    "SELECT * FROM read_text('{secret}')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('{secret}')",
    "SELECT * FROM read_blob('{secret}')",
    "SELECT * FROM read_json('{secret}')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')",
    "SELECT * FROM '{secret}'",
    "WITH t AS (SELECT content FROM read_text('{secret}')) SELECT * FROM t",
    "SELECT (SELECT content FROM read_text('{secret}')) AS c, kind FROM receipts",
    "INSTALL httpfs",
    "FORCE INSTALL httpfs FROM 'http://127.0.0.1:9'",
    "LOAD httpfs",
    "LOAD '{root}/evil.duckdb_extension'",
    "ATTACH '{root}/other.duckdb' AS other",
    "ATTACH ':memory:' AS scratch",
    "DETACH other",
    "PRAGMA version",
    "PRAGMA enable_checkpoint_on_shutdown",
    "CALL pragma_version()",
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "SET threads = 1",
    "CREATE TABLE scratch AS SELECT 1",
    "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    "CREATE MACRO m() AS 1",
    "DELETE FROM receipts",
    "UPDATE receipts SET cache_key = NULL",
    "DROP TABLE receipts",
    "INSERT INTO receipts SELECT * FROM receipts",
    "CHECKPOINT",
    "VACUUM",
    "SELECT 1; COPY receipts TO '{root}/stolen2.csv'",
    "EXPORT DATABASE '{root}/export2' (FORMAT parquet)",
]


@pytest.mark.parametrize("template", ESCAPES)
def test_every_escape_is_refused_with_one_line(world: dict[str, Path], template: str) -> None:
    before = {p: p.read_bytes() for p in (world["plan"], world["secret"])}
    listing = sorted(p.name for p in world["root"].iterdir())
    code, out = _query(world, template.format(**world))
    assert code == 1, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: CatalogError: query "), out
    assert "Traceback" not in out and "unexpected" not in out and "top secret" not in out
    assert len(out) < 400, out
    assert {p: p.read_bytes() for p in before} == before  # nothing overwritten
    assert sorted(p.name for p in world["root"].iterdir()) == listing  # nothing written beside the home


def test_reads_of_the_catalog_still_work(world: dict[str, Path]) -> None:
    for sql in ("SELECT kind, count(*) AS n FROM receipts GROUP BY kind", "SHOW TABLES", "DESCRIBE receipts", "EXPLAIN SELECT 1"):
        code, out = _query(world, sql)
        assert code == 0, (sql, out)
    assert "ingest" in _query(world, "SELECT kind FROM receipts")[1]


def test_the_engine_fence_holds_without_the_statement_check(world: dict[str, Path]) -> None:
    """The sandboxed connection alone refuses files, extensions and settings changes."""
    home = Home(world["home"])
    digest = hashlib.sha256(world["secret"].read_bytes()).hexdigest()
    with home.catalog.connect(sandbox=True) as con:
        assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)
        for sql in (
            f"SELECT * FROM read_text('{world['secret']}')",
            f"COPY receipts TO '{world['root']}/x.csv'",
            "LOAD httpfs",
            f"ATTACH '{world['root']}/y.duckdb'",
        ):
            with pytest.raises(duckdb.PermissionException):
                con.execute(sql)
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error):
            con.execute("DELETE FROM receipts")
    assert hashlib.sha256(world["secret"].read_bytes()).hexdigest() == digest
    assert not (world["root"] / "x.csv").exists()


def test_an_unbounded_query_is_stopped_and_lets_go_of_the_catalog(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """`range(1e14)` and `repeat('x', 3e9)` ran until killed, holding the catalog's lock: now a time limit stops
    them in one line, a row cap refuses a result too large to print, and SQL that is not UTF-8 is refused."""
    from voxledger.schemas.errors import CatalogError
    from voxledger.stores.sandbox import run_query

    home = Home(world["home"])
    monkeypatch.setenv("VOXLEDGER_QUERY_TIMEOUT_S", "1")
    for sql in ("SELECT sum(range) FROM range(100000000000000)", "SELECT length(repeat('x', 3000000000))"):
        with pytest.raises(CatalogError, match="query stopped after 1 s.*VOXLEDGER_QUERY_TIMEOUT_S"):
            run_query(home.catalog, sql)
    monkeypatch.setenv("VOXLEDGER_QUERY_MAX_ROWS", "10")
    with pytest.raises(CatalogError, match="more than 10 rows; add LIMIT"):
        run_query(home.catalog, "SELECT * FROM range(11)")
    assert len(run_query(home.catalog, "SELECT * FROM range(10)")[1]) == 10
    with pytest.raises(CatalogError, match="not UTF-8"):
        run_query(home.catalog, "SELECT '\udcff'")
    with home.catalog.connect() as con:  # the lock was let go: a writer gets the catalog at once
        con.execute("SELECT 1")
