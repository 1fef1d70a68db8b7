"""The stat-cache scrub (``store verify --deep``) finds a byte flipped under an unchanged stat.

A flip below the file system leaves size, mtime and ctime as they were. A test cannot write a
file without moving its ctime, so each test flips the byte through the file system, puts the
mtime back, and then writes the stat-cache entry the flip would have left in place: the file's
current stat key with the digest of its bytes before the flip. That is exactly the state bit rot
produces: the cache vouches, under the file's stat, for bytes the file no longer holds.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from voxledger.stores.hashing import SETTLE_NS, hash_files, sha256_file, stat_cache_use, stat_key
from voxledger.stores.home import Home
from voxledger.stores.scrub import scrub_stat_cache
from voxledger.stores.verify import verify_store


def _settle() -> None:
    time.sleep(SETTLE_NS / 1e9 + 0.02)  # a stat is cached only once its ctime lies this far back


def _rot(home: Home, path: Path) -> str:
    """Flip one byte of ``path`` as bit rot would (times restored, the cache entry left vouching); the old digest."""
    before = sha256_file(path)
    st = path.stat()
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    path.chmod(st.st_mode & 0o777)
    home.stat_cache.put_many([(stat_key(path.stat()), before, path)])
    return before


def test_a_corpus_file_rotted_under_its_stat_is_served_until_the_scrub_drops_it(home: Home, tmp_path: Path) -> None:
    clip = tmp_path / "corpus" / "a.wav"
    clip.parent.mkdir()
    clip.write_bytes(b"RIFF" + bytes(range(256)) * 40)
    _settle()
    hash_files([clip], cache=home.stat_cache)
    old = _rot(home, clip)
    assert hash_files([clip], cache=Home(home.root).stat_cache)[clip] == old  # the hazard: the cache vouches for old bytes
    report = verify_store(Home(home.root), deep=True)
    assert report.stat_cache is not None and len(report.stat_cache.lied) == 1
    assert str(clip) in report.stat_cache.lied[0] and old in report.stat_cache.lied[0] and "entry dropped" in report.stat_cache.lied[0]
    assert report.problems == report.stat_cache.lied  # the store itself is intact
    assert hash_files([clip], cache=Home(home.root).stat_cache)[clip] == sha256_file(clip) != old  # read again after the scrub


def test_a_store_object_rotted_under_its_stat_is_damaged_and_no_longer_vouched_for(home: Home) -> None:
    sha = home.blobs.put_bytes(b"evaluation clip " * 500)
    _rot(home, home.blobs.path_of(sha))
    assert Home(home.root).blobs.damaged([sha]) == []  # the hazard: reuse's check trusts the entry
    report = verify_store(Home(home.root))  # plain verify re-hashes every object and drops the entry
    assert len(report.damaged) == 1 and sha in report.damaged[0] and report.stat_cache is None
    assert Home(home.root).blobs.damaged([sha]) == [sha]


def test_after_a_scrub_every_entry_left_was_confirmed(home: Home, tmp_path: Path) -> None:
    files = [tmp_path / f"f{i}" for i in range(4)]
    for i, f in enumerate(files):
        f.write_bytes(b"x" * (100 + i))
    _settle()
    hash_files(files, cache=home.stat_cache)
    files[0].unlink()  # stale: its file is gone
    files[1].write_bytes(b"rewritten")  # stale: its stat moved on
    home.stat_cache.put_many([((1, 2, 3, 4, 5), "0" * 64, tmp_path / "nowhere")])  # stale: no such file
    with closing(sqlite3.connect(home.root / "cache" / "stat-cache.sqlite")) as conn, conn:  # written before entries kept paths
        conn.execute("INSERT INTO stat_cache VALUES (9, 9, 9, 9, 9, ?, NULL)", ["1" * 64])
    report = scrub_stat_cache(home.stat_cache)
    assert (report.entries, report.confirmed, report.stale, report.unlocated, report.lied) == (6, 2, 3, 1, [])
    assert report.rehashed == 2 and report.dropped == 4
    assert sorted(p for _, _, p in home.stat_cache.entries()) == [str(files[2]), str(files[3])]


def test_untrusting_block_reads_every_file_and_counts_what_a_trusting_one_took_on_trust(home: Home, tmp_path: Path) -> None:
    clip = tmp_path / "a.wav"
    clip.write_bytes(b"a" * 1000)
    _settle()
    hash_files([clip], cache=home.stat_cache)
    old = _rot(home, clip)
    with stat_cache_use() as outer:
        with stat_cache_use() as inner:
            assert hash_files([clip], cache=home.stat_cache)[clip] == old
        with stat_cache_use(trust=False) as deep:
            assert hash_files([clip], cache=home.stat_cache)[clip] == sha256_file(clip)
    assert (inner.vouched, deep.vouched, outer.vouched) == (1, 0, 1)


def test_a_cache_file_from_before_paths_keeps_its_entries_and_the_scrub_drops_them(tmp_path: Path) -> None:
    db = tmp_path / "home" / "cache" / "stat-cache.sqlite"
    db.parent.mkdir(parents=True)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(
            "CREATE TABLE stat_cache (dev INTEGER, ino INTEGER, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER,"
            " sha256 TEXT NOT NULL, PRIMARY KEY (dev, ino, size, mtime_ns, ctime_ns))"
        )
        conn.execute("INSERT INTO stat_cache VALUES (1, 2, 3, 4, 5, ?)", ["2" * 64])
    home = Home(tmp_path / "home")
    assert home.stat_cache.persistent and home.stat_cache.get_many([(1, 2, 3, 4, 5)]) == {(1, 2, 3, 4, 5): "2" * 64}
    report = scrub_stat_cache(home.stat_cache)
    assert (report.unlocated, report.dropped, home.stat_cache.entries()) == (1, 1, [])
