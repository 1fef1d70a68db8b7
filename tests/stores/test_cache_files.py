"""The home's two SQLite caches (stat cache, memo of derived values) only save work: a damaged
file is set aside as evidence and started afresh, a failure in use falls back to memory, and no
command fails because of either."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from click.testing import CliRunner

from voxledger.cli import main
from voxledger.stores.hashing import hash_files
from voxledger.stores.home import Home

GARBAGE = b"this is not a database, whatever it once was\n" * 200


def _aside(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"{name}.damaged-*"))


def test_damaged_cache_files_are_set_aside_and_started_afresh(tmp_path: Path) -> None:
    cache = tmp_path / "h" / "cache"
    cache.mkdir(parents=True)
    (cache / "stat-cache.sqlite").write_bytes(GARBAGE)
    (cache / "derived.sqlite").write_bytes(GARBAGE[:100])
    home = Home(tmp_path / "h")
    assert home.stat_cache.persistent and home.memo.persistent
    for name in ("stat-cache.sqlite", "derived.sqlite"):
        (kept,) = _aside(cache, name)
        assert kept.read_bytes() in (GARBAGE, GARBAGE[:100]), "the damaged bytes are kept as they were"
    # both work again, and persist across home objects
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 1000)
    os.utime(f, ns=(time.time_ns() - 10**9, time.time_ns() - 10**9))
    digest = hash_files([f], cache=home.stat_cache)[f]
    home.memo.put_many("k", {"a": ({"x": 1}, {"v": 2})})
    again = Home(tmp_path / "h")
    assert again.memo.get_many("k", {"a": {"x": 1}}) == {"a": {"v": 2}}
    assert hash_files([f], cache=again.stat_cache)[f] == digest


def test_a_command_on_a_home_with_a_damaged_stat_cache_works(tmp_path: Path) -> None:
    (tmp_path / "h" / "cache").mkdir(parents=True)
    (tmp_path / "h" / "cache" / "stat-cache.sqlite").write_bytes(GARBAGE)
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "h"), "query", "SELECT 41 + 1 AS answer", "--json"])
    assert result.exit_code == 0, result.output
    assert "42" in result.output and "defect" not in result.output
    assert _aside(tmp_path / "h" / "cache", "stat-cache.sqlite")


def test_a_cache_that_fails_in_use_falls_back_to_memory(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    memo = home.memo
    memo.put_many("k", {"a": ({"x": 1}, {"v": 1})})
    with sqlite3.connect(tmp_path / "h" / "cache" / "derived.sqlite") as conn:
        conn.execute("DROP TABLE derived")  # from outside: every later statement of the memo fails
    assert memo.get_many("k", {"a": {"x": 1}}) == {}
    assert not memo.persistent
    memo.put_many("k", {"b": ({"x": 2}, {"v": 2})})
    assert memo.get_many("k", {"b": {"x": 2}}) == {"b": {"v": 2}}
    stat = home.stat_cache
    with sqlite3.connect(tmp_path / "h" / "cache" / "stat-cache.sqlite") as conn:
        conn.execute("DROP TABLE stat_cache")
    f = tmp_path / "a.bin"
    f.write_bytes(b"y")
    assert hash_files([f], cache=stat)[f] and not stat.persistent
