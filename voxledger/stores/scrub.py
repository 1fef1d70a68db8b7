"""The stat-cache scrub (``voxledger store verify --deep``): re-hash every file the stat cache vouches for.

The stat cache lets reuse skip reading a file whose (device, inode, size, mtime, ctime) are those
it had when it was hashed. A byte flipped below the file system (bit rot, a controller fault, a
raw write to the block device) changes none of these, so the cache would vouch for the old
digest for ever. The scrub takes every entry, stats the path it was recorded at and:

- **confirmed**: the stat is the entry's and the bytes hash to its digest: kept;
- **lied**: the stat is the entry's but the bytes hash to something else: reported, dropped;
- **stale**: the path is gone or its stat moved on (rewritten, replaced, another copy of a home):
  the entry can never be hit again, dropped;
- **unlocated**: recorded before entries kept their path: dropped.

So after a scrub every entry left was confirmed by a re-hash in that scrub, and whatever was
dropped is read again the next time a stage uses it. A file already hashed in the same run
(``store verify`` hashes every store object first) is compared without reading it twice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from voxledger.stores.hashing import StatCache, StatKey, map_on_cores, sha256_file, stat_key


@dataclass
class ScrubReport:
    """What ``scrub_stat_cache`` found: entry counts and one line per entry that lied."""

    entries: int = 0
    rehashed: int = 0
    confirmed: int = 0
    stale: int = 0
    unlocated: int = 0
    lied: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> int:
        return len(self.lied) + self.stale + self.unlocated


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _hash(path: str) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def scrub_stat_cache(cache: StatCache, hashed: dict[StatKey, str] | None = None) -> ScrubReport:
    """Check every entry of ``cache`` against its file (see the module docstring) and drop those that
    do not hold. ``hashed``: stat key -> digest of files this run already read (not read again)."""
    known = hashed or {}
    report = ScrubReport()
    entries = cache.entries()
    report.entries = len(entries)
    drop: list[StatKey] = []
    todo: list[tuple[StatKey, str, str]] = []
    for key, sha256, path in entries:
        if path is None:
            report.unlocated += 1
            drop.append(key)
            continue
        st = _stat(path)
        if st is None or stat_key(st) != key:
            report.stale += 1
            drop.append(key)
        else:
            todo.append((key, sha256, path))
    unread = [path for key, _, path in todo if key not in known]
    fresh = dict(zip(unread, map_on_cores(_hash, unread), strict=True))
    report.rehashed = len(unread)
    for key, sha256, path in todo:
        actual = known[key] if key in known else fresh[path]
        if actual == sha256:
            report.confirmed += 1
            continue
        drop.append(key)
        if actual is None:
            report.stale += 1  # vanished between its stat and its read
        else:
            report.lied.append(
                f"{path}: the stat cache vouched for {sha256} under an unchanged stat, its bytes hash to {actual} "
                "(changed below the file system); entry dropped, so the next run reads it; restore the file if it was not meant to change"
            )
    cache.drop(drop)
    return report
