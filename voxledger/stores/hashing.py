"""Streaming sha256 for files, parallel hashing of many files, and a persistent stat cache.

hashlib's sha256 runs in OpenSSL (SHA-NI where the CPU has it) and releases the GIL for large
updates, so a thread pool hashes several files on several cores.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

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


class StatCache:
    """Persistent map from a file's stat identity to its digest (SQLite, safe for many processes).

    A hit requires device, inode, size, mtime and ctime to match exactly, so a rewritten file
    (even with a restored mtime: ctime still moves) is hashed again. With ``read_only`` (a home
    mounted read-only, say), or when the file cannot be opened for writing, the cache lives in
    memory for this process: it only saves re-hashing, so nothing is lost but speed.
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._path = path
        self._local = threading.local()
        self._memory: dict[StatKey, str] | None = {} if read_only else None
        if read_only:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._conn() as conn:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS stat_cache (dev INTEGER, ino INTEGER, size INTEGER,"
                    " mtime_ns INTEGER, ctime_ns INTEGER, sha256 TEXT NOT NULL,"
                    " PRIMARY KEY (dev, ino, size, mtime_ns, ctime_ns))"
                )
        except (OSError, sqlite3.OperationalError):
            self._memory = {}  # not writable here: keep this process's digests in memory instead

    @property
    def persistent(self) -> bool:
        """False when digests are kept in memory only (read-only home or unwritable cache file)."""
        return self._memory is None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(self, keys: list[StatKey]) -> dict[StatKey, str]:
        """Look up many keys at once; missing keys are absent from the result."""
        if self._memory is not None:
            return {k: self._memory[k] for k in keys if k in self._memory}
        found: dict[StatKey, str] = {}
        conn = self._conn()
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            where = " OR ".join(["(dev=? AND ino=? AND size=? AND mtime_ns=? AND ctime_ns=?)"] * len(chunk))
            params = [v for key in chunk for v in key]
            for row in conn.execute(f"SELECT dev, ino, size, mtime_ns, ctime_ns, sha256 FROM stat_cache WHERE {where}", params):
                found[(row[0], row[1], row[2], row[3], row[4])] = row[5]
        return found

    def put_many(self, items: Iterable[tuple[StatKey, str]]) -> None:
        """Record digests for stat keys."""
        if self._memory is not None:
            self._memory.update(items)
            return
        conn = self._conn()
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO stat_cache VALUES (?, ?, ?, ?, ?, ?)", [(*k, d) for k, d in items])
        conn.execute("COMMIT")


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
            cache.put_many((keys[p], d) for p, d in fresh.items() if settled_before(stats[p], now))
        result.update(fresh)
    return result
