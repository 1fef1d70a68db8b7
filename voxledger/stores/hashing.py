"""Streaming sha256 for files, parallel hashing of many files, and a persistent stat cache.

hashlib's sha256 runs in OpenSSL (SHA-NI where the CPU has it) and releases the GIL for large
updates, so a thread pool hashes several files on several cores.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

CHUNK_BYTES = 1 << 20
_buffers = threading.local()


def _buffer(chunk_bytes: int) -> bytearray:
    """This thread's read buffer: allocating (and zeroing) 1 MiB per file held the GIL longer
    than hashing a 64 KiB file took, so threads could not overlap on small files."""
    buf: bytearray | None = getattr(_buffers, "buf", None)
    if buf is None or len(buf) != chunk_bytes:
        buf = _buffers.buf = bytearray(chunk_bytes)
    return buf


def sha256_stream(fileobj: os.PathLike[str] | str | int, chunk_bytes: int = CHUNK_BYTES) -> tuple[str, int]:
    """Hash a file by path (or an open file descriptor) in fixed chunks; return (hex, size)."""
    digest = hashlib.sha256()
    buf = _buffer(chunk_bytes)
    view = memoryview(buf)
    size = 0
    own = not isinstance(fileobj, int)
    fd: int = fileobj if isinstance(fileobj, int) else os.open(fileobj, os.O_RDONLY)
    try:
        while True:
            n = os.readv(fd, [buf])
            if not n:
                break
            digest.update(view[:n])
            size += n
    finally:
        if own:
            os.close(fd)
    return digest.hexdigest(), size


def sha256_file(path: os.PathLike[str] | str) -> str:
    """Hex sha256 of one file, streamed."""
    return sha256_stream(path)[0]


T = TypeVar("T")
R = TypeVar("R")


def map_on_cores(fn: Callable[[T], R], items: list[T], workers: int | None = None) -> list[R]:
    """``fn`` over ``items`` on one thread per core, results in order. Each thread takes one slice
    (not one task per item: per-task pool overhead holds the GIL longer than hashing a small file)."""
    n = min(workers or default_workers(), len(items))
    if n <= 1:
        return [fn(x) for x in items]
    slices = [items[i::n] for i in range(n)]
    with ThreadPoolExecutor(max_workers=n) as pool:
        parts = list(pool.map(lambda chunk: [fn(x) for x in chunk], slices))
    out: list[R] = [None] * len(items)  # type: ignore[list-item]
    for i, part in enumerate(parts):
        out[i::n] = part
    return out


def default_workers() -> int:
    """One hashing thread per available core."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


StatKey = tuple[int, int, int, int, int]
P = TypeVar("P", Path, str)

SETTLE_NS = 50_000_000
"""File timestamps come from a coarse clock (one kernel tick, at most 10 ms): a write in the same
tick as the stat that was cached would leave the same mtime and ctime. A stat is cached only when
its ctime lies more than this before the moment it was taken, so any later write moves it."""


def settled_before(st: os.stat_result, now_ns: int) -> bool:
    """True when ``st`` (taken at ``now_ns``, wall clock) may go into a stat cache."""
    return max(st.st_mtime_ns, st.st_ctime_ns) < now_ns - SETTLE_NS


def stat_key(st: os.stat_result) -> StatKey:
    """(device, inode, size, mtime_ns, ctime_ns): any change to the file changes one of these."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def prepare_cache_db(path: Path, create_sql: str) -> bool:
    """Create a cache's SQLite file and table at ``path``; True when the file can be used.

    A cache only saves work, so a file SQLite cannot read as a database (damaged, truncated, or
    not a database at all) is set aside as ``<name>.damaged-<time>-<pid>`` (kept as evidence,
    with its ``-wal``/``-shm``), logged, and started afresh. False when the file cannot be
    written here (a read-only folder, a lock held past the timeout): the caller keeps its values
    in memory for this process.
    """
    for attempt in (0, 1):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(create_sql)
            finally:
                conn.close()
            return True
        except (OSError, sqlite3.OperationalError):
            return False
        except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
            if attempt:
                return False
            stamp = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"
            for suffix in ("", "-wal", "-shm"):
                src = path.with_name(path.name + suffix)
                if src.exists():
                    os.replace(src, path.with_name(f"{path.name}{suffix}.damaged-{stamp}"))
            logging.getLogger("voxledger.stores").warning(
                "%s is not a readable SQLite database (%s): set aside as %s.damaged-%s; starting an empty cache",
                path,
                exc,
                path.name,
                stamp,
            )
    return False


class SqliteCache:
    """A cache in one SQLite file (WAL, one connection per thread, safe for many processes) that
    falls back to this process's memory: with ``read_only`` (a home mounted read-only, say), when
    the file cannot be written here, or after it fails in use. It only saves work, so nothing is
    lost but speed; a damaged file is set aside by `prepare_cache_db`."""

    def __init__(self, path: Path, create_sql: str, *, read_only: bool = False) -> None:
        self._path = path
        self._local = threading.local()
        self._memory: dict[Any, Any] | None = {} if read_only or not prepare_cache_db(path, create_sql) else None

    @property
    def persistent(self) -> bool:
        """False when values are kept in memory only (read-only home, unwritable or failed file)."""
        return self._memory is None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def _in_memory_from_now(self, exc: Exception) -> dict[Any, Any]:
        """Keep this process's values in memory after the file failed in use (damaged, or locked past its
        timeout), and say so; the next process checks the file again."""
        logging.getLogger("voxledger.stores").warning("%s failed (%s): this process keeps that cache in memory", self._path, exc)
        self._memory = {}
        return self._memory


@dataclass
class StatCacheUse:
    """How the stat caches are used inside one ``stat_cache_use`` block: whether a hit may stand in for
    reading the file (``trust``), and how many files the caches vouched for (``vouched``: counted
    into every enclosing block too, so a pipeline's count includes its stages')."""

    trust: bool = True
    vouched: int = 0
    parent: StatCacheUse | None = None

    def _add(self, n: int) -> None:
        use: StatCacheUse | None = self
        while use is not None:
            use.vouched += n
            use = use.parent


_use: ContextVar[StatCacheUse | None] = ContextVar("voxledger_stat_cache_use", default=None)


@contextmanager
def stat_cache_use(*, trust: bool = True) -> Iterator[StatCacheUse]:
    """Count (and with ``trust=False`` refuse) stat-cache hits for the block: every ``StatCache`` lookup
    in it, on any home, answers nothing, so each file is read and hashed. A block inside an untrusting
    one never trusts. A context variable, so each thread and Prefect run sees its own block."""
    parent = _use.get()
    use = StatCacheUse(trust=trust and (parent is None or parent.trust), parent=parent)
    token = _use.set(use)
    try:
        yield use
    finally:
        _use.reset(token)


StatEntry = tuple[StatKey, str, str | None]
"""(stat key, sha256, the path it was last seen at; None for entries recorded before paths were kept)."""


class StatCache(SqliteCache):
    """Persistent map from a file's stat identity to its digest (a `SqliteCache`), with the path the
    file was seen at, so a scrub (``voxledger store verify --deep``) can re-hash what it vouches for.

    A hit requires device, inode, size, mtime and ctime to match exactly, so a rewritten file
    (even with a restored mtime: ctime still moves) is hashed again. What no stat can show (a
    byte flipped below the file system) is found by the scrub; inside ``stat_cache_use(trust=False)``
    no entry is trusted.
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        super().__init__(
            path,
            "CREATE TABLE IF NOT EXISTS stat_cache (dev INTEGER, ino INTEGER, size INTEGER,"
            " mtime_ns INTEGER, ctime_ns INTEGER, sha256 TEXT NOT NULL, path TEXT,"
            " PRIMARY KEY (dev, ino, size, mtime_ns, ctime_ns))",
            read_only=read_only,
        )
        self._paths: dict[StatKey, str | None] = {}  # in-memory mode: where each entry's file was seen
        if self._memory is None:
            try:  # a cache file from before paths were kept: its rows stay, with no path (a scrub drops them)
                self._conn().execute("ALTER TABLE stat_cache ADD COLUMN path TEXT")
            except sqlite3.OperationalError:
                pass  # "duplicate column name": already there

    def get_many(self, keys: list[StatKey]) -> dict[StatKey, str]:
        """Look up many keys at once; missing keys are absent from the result. Inside
        ``stat_cache_use(trust=False)`` nothing is found; the hits are counted in the enclosing block."""
        use = _use.get()
        if use is not None and not use.trust:
            return {}
        found = self._lookup(keys)
        if use is not None and found:
            use._add(len(found))
        return found

    def _lookup(self, keys: list[StatKey]) -> dict[StatKey, str]:
        if self._memory is not None:
            return {k: self._memory[k] for k in keys if k in self._memory}
        found: dict[StatKey, str] = {}
        try:
            conn = self._conn()
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                where = " OR ".join(["(dev=? AND ino=? AND size=? AND mtime_ns=? AND ctime_ns=?)"] * len(chunk))
                params = [v for key in chunk for v in key]
                for row in conn.execute(f"SELECT dev, ino, size, mtime_ns, ctime_ns, sha256 FROM stat_cache WHERE {where}", params):
                    found[(row[0], row[1], row[2], row[3], row[4])] = row[5]
        except sqlite3.Error as exc:
            self._in_memory_from_now(exc)
            return {}
        return found

    def put_many(self, items: Iterable[tuple[StatKey, str, os.PathLike[str] | str]]) -> None:
        """Record digests for stat keys, each with the path its file was hashed at."""
        rows = [(k, d, str(p)) for k, d, p in items]
        if self._memory is None:
            try:
                write_rows(self._conn(), "INSERT OR REPLACE INTO stat_cache VALUES (?, ?, ?, ?, ?, ?, ?)", [(*k, d, p) for k, d, p in rows])
                return
            except sqlite3.Error as exc:
                self._in_memory_from_now(exc)
        assert self._memory is not None
        self._memory.update((k, d) for k, d, _ in rows)
        self._paths.update((k, p) for k, _, p in rows)

    def entries(self) -> list[StatEntry]:
        """Every entry, in no particular order."""
        if self._memory is not None:
            return [(k, d, self._paths.get(k)) for k, d in self._memory.items()]
        try:
            rows = self._conn().execute("SELECT dev, ino, size, mtime_ns, ctime_ns, sha256, path FROM stat_cache").fetchall()
        except sqlite3.Error as exc:
            self._in_memory_from_now(exc)
            return []
        return [((r[0], r[1], r[2], r[3], r[4]), r[5], r[6]) for r in rows]

    def drop(self, keys: Iterable[StatKey]) -> None:
        """Forget these entries: the next use of their files hashes them again."""
        gone = list(keys)
        if self._memory is not None:
            for k in gone:
                self._memory.pop(k, None)
                self._paths.pop(k, None)
            return
        try:
            sql = "DELETE FROM stat_cache WHERE dev=? AND ino=? AND size=? AND mtime_ns=? AND ctime_ns=?"
            write_rows(self._conn(), sql, [tuple(k) for k in gone])
        except sqlite3.Error as exc:
            self._in_memory_from_now(exc)


def write_rows(conn: sqlite3.Connection, sql: str, rows: list[tuple[object, ...]]) -> None:
    """``sql`` for every row in one transaction (rolled back when it fails)."""
    conn.execute("BEGIN")
    try:
        conn.executemany(sql, rows)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def hash_files(
    paths: list[P],
    *,
    workers: int | None = None,
    cache: StatCache | None = None,
    stats: dict[P, os.stat_result] | None = None,
    stats_taken_ns: int | None = None,
) -> dict[P, str]:
    """Hash many files in parallel; with a stat cache, unchanged files are not read at all.

    ``stats``: the files' stats when the caller has just taken them (saves one stat each), with
    ``stats_taken_ns``, the wall clock read before the first of them was taken.
    """
    now = time.time_ns() if stats is None or stats_taken_ns is None else stats_taken_ns
    stats = {p: stats[p] if stats is not None and p in stats else os.stat(p) for p in paths}
    keys = {p: stat_key(st) for p, st in stats.items()}
    known = cache.get_many(list(keys.values())) if cache is not None else {}
    result = {p: known[k] for p, k in keys.items() if k in known}
    todo = [p for p in paths if p not in result]
    n = workers or default_workers()
    if todo:
        fresh = dict(zip(todo, map_on_cores(sha256_file, todo, n), strict=True))
        if cache is not None:  # a file written in the same clock tick as its stat is hashed again next time
            cache.put_many((keys[p], d, p) for p, d in fresh.items() if settled_before(stats[p], now))
        result.update(fresh)
    return result
