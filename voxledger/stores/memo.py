"""A persistent memo of derived values (a training run's phoneme durations, say), kept per home.

Deriving some inputs costs far more than checking them: forced alignment of one clip takes
~84 ms where hashing it takes well under one, and a training stage's cache key needs every
utterance's durations before the cache can even be asked. The memo remembers a derivation by a
key that names everything the value is computed from (the input bytes' SHA-256, the parameters,
the deriving code's digest), so an unchanged input is never derived twice, while a changed one
(new audio bytes, new text, new aligner code) simply misses.

Each entry is a canonical-JSON blob in the home's content-addressed store holding its own key and
its value; a SQLite table maps the key's digest to the entry's digest. A read verifies the blob
against its digest and the key inside it against the key asked for, so a damaged blob or a row
pointing at the wrong entry is detected, counted in `MemoStats.rejected`, and derived again (the
fresh entry replaces the row). The memo only saves work: the inputs themselves are still hashed
on every run, and the value it returns is the one the same code computed from the same bytes.
What it cannot catch is a forged entry whose bytes and key are both consistent (someone with
write access to the store writing a wrong value under the right key); ``voxledger reproduce``
re-runs a stage in a scratch home, without this memo, and compares.

Read-only homes keep the memo in this process's memory.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxledger.schemas.canonical import canonical_bytes, canonical_digest
from voxledger.schemas.errors import BlobMissingError, DigestMismatchError
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.hashing import SqliteCache, write_rows

ENTRY_FORMAT = "voxledger-memo-entry/1"


@dataclass
class MemoStats:
    """What this memo object answered: hits, misses, and entries refused as damaged or mismatched."""

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    stored: int = 0


class DerivedMemo(SqliteCache):
    """key (JSON-able mapping) -> value (JSON-able mapping) per ``kind``, entries in the blob store
    (a `SqliteCache` of key digest -> entry digest)."""

    def __init__(self, path: Path, blobs: LocalBlobStore, *, read_only: bool = False) -> None:
        super().__init__(
            path,
            "CREATE TABLE IF NOT EXISTS derived (kind TEXT NOT NULL, key_sha256 TEXT NOT NULL,"
            " entry_sha256 TEXT NOT NULL, PRIMARY KEY (kind, key_sha256))",
            read_only=read_only,
        )
        self._blobs = blobs
        self.stats = MemoStats()

    @staticmethod
    def key_digest(kind: str, key: Mapping[str, Any]) -> str:
        """The digest a key is filed under (canonical JSON of kind and key)."""
        return canonical_digest({"kind": kind, "key": dict(key)})

    def get_many(self, kind: str, keys: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Values of the names in ``keys`` (name -> key) that the memo holds intact; others are absent."""
        digests = {name: self.key_digest(kind, key) for name, key in keys.items()}
        if self._memory is not None:
            found = {n: self._memory[(kind, d)] for n, d in digests.items() if (kind, d) in self._memory}
        else:
            rows = self._rows(kind, sorted(set(digests.values())))
            found = {}
            for name, d in digests.items():
                if d not in rows:
                    continue
                value = self._read_entry(rows[d], kind, keys[name])
                if value is None:
                    self.stats.rejected += 1
                else:
                    found[name] = value
        self.stats.hits += len(found)
        self.stats.misses += len(keys) - len(found)
        return found

    def _rows(self, kind: str, wanted: list[str]) -> dict[str, str]:
        """key digest -> entry digest of the rows filed for ``wanted``; none when the file fails (then memory only)."""
        rows: dict[str, str] = {}
        try:
            conn = self._conn()
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for key_sha, entry_sha in conn.execute(
                    f"SELECT key_sha256, entry_sha256 FROM derived WHERE kind = ? AND key_sha256 IN ({marks})", [kind, *chunk]
                ):
                    rows[key_sha] = entry_sha
        except sqlite3.Error as exc:
            self._in_memory_from_now(exc)
            return {}
        return rows

    def _read_entry(self, entry_sha: str, kind: str, key: Mapping[str, Any]) -> Any:
        """The entry's value when its bytes verify and it was filed for exactly this key, else None."""
        try:
            doc = json.loads(self._blobs.get_bytes(entry_sha))
        except (BlobMissingError, DigestMismatchError, ValueError, OSError):
            return None
        if not isinstance(doc, dict) or doc.get("format") != ENTRY_FORMAT or doc.get("kind") != kind:
            return None
        if canonical_bytes(doc.get("key")) != canonical_bytes(dict(key)):
            return None
        return doc.get("value")

    def put_many(self, kind: str, items: Mapping[str, tuple[Mapping[str, Any], Any]]) -> None:
        """File ``value`` under ``key`` for each name -> (key, value); a later put replaces the row."""
        if not items:
            return
        if self._memory is not None:
            for key, value in items.values():
                self._memory[(kind, self.key_digest(kind, key))] = value
            self.stats.stored += len(items)
            return
        entries = [
            canonical_bytes({"format": ENTRY_FORMAT, "kind": kind, "key": dict(key), "value": value}) for key, value in items.values()
        ]
        digests = self._blobs.put_many_bytes(entries)
        rows: list[tuple[object, ...]] = [
            (kind, self.key_digest(kind, key), sha) for (key, _), sha in zip(items.values(), digests, strict=True)
        ]
        try:
            write_rows(self._conn(), "INSERT OR REPLACE INTO derived VALUES (?, ?, ?)", rows)
        except sqlite3.Error as exc:
            self._in_memory_from_now(exc)
            self.put_many(kind, items)
            return
        self.stats.stored += len(rows)
