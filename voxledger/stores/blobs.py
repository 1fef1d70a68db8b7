"""Content-addressed blob store: objects at ``objects/sha256/ab/cdef...``, written atomically.

Write protocol (crash safe): stream into a temp file inside the store while hashing, fsync it,
hard-link it to its final name (link fails if the name exists: nothing is ever overwritten), fsync
the directory, remove the temp name. A reader never sees a partial object because an object name
only ever appears as a complete, fsynced file. An existing object is verified, never rewritten,
with one exception: an object whose bytes no longer hash to its name is moved to ``quarantine/``
(kept, never deleted) when the right bytes are put again, so a producer that regenerates an
artifact heals the store instead of failing on the damaged copy.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from voxledger.schemas.canonical import is_sha256_hex
from voxledger.schemas.errors import BlobMissingError, DigestMismatchError, VoxledgerError
from voxledger.stores.hashing import CHUNK_BYTES, StatCache, StatKey, map_on_cores, settled_before, sha256_stream, stat_key


class BlobStore(Protocol):
    """What callers need from a store; an S3-compatible backend implements the same five calls."""

    def put_bytes(self, data: bytes) -> str: ...
    def put_file(self, path: Path) -> str: ...
    def has(self, sha256: str) -> bool: ...
    def open(self, sha256: str) -> BinaryIO: ...
    def verify(self, sha256: str) -> None: ...


def _hash_one(path: str) -> tuple[str, os.stat_result, bool]:
    """(digest, the stat taken before reading, whether that stat may be cached: see ``settled_before``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        now = time.time_ns()
        st = os.fstat(fd)
        return sha256_stream(fd)[0], st, settled_before(st, now)
    finally:
        os.close(fd)


def _syncfs(path: Path) -> bool:
    """``syncfs(2)`` on the filesystem holding ``path``; False where the C library lacks it."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if fn(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {path} failed: {os.strerror(err)}")
        return True
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync a directory so a new name in it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_digest(sha256: str) -> None:
    if not is_sha256_hex(sha256):
        raise VoxledgerError(f"{sha256!r} is not a sha256 digest: expected 64 lower-case hex characters")


class VerifyingReader(io.RawIOBase):
    """Reads an object and, on reaching its end, raises DigestMismatchError if the bytes differ."""

    def __init__(self, path: Path, sha256: str) -> None:
        self._f = open(path, "rb")  # noqa: SIM115 (closed by close())
        self._h = hashlib.sha256()
        self._expected = sha256
        self._path = path
        self._checked = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self._f.readinto(buffer)
        if n:
            self._h.update(memoryview(buffer)[:n])
        elif not self._checked:
            self._checked = True
            actual = self._h.hexdigest()
            if actual != self._expected:
                raise DigestMismatchError(
                    f"object {self._expected} at {self._path} is corrupt: its bytes hash to {actual}; "
                    "restore it from a replica or re-put the original file"
                )
        return n or 0

    def close(self) -> None:
        self._f.close()
        super().close()


class LocalBlobStore:
    """Blob store on a local filesystem directory."""

    def __init__(self, root: Path, verified: StatCache | None = None) -> None:
        """``verified``: a stat cache remembering which object files were hashed and found intact."""
        self.root = root
        self._verified_cache = verified
        self.objects = root / "objects" / "sha256"
        self.tmp = root / "tmp"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self._verified: dict[str, tuple[int, int, int]] = {}
        self._deferred: set[Path] | None = None  # objects written inside ``deferred_sync``, not yet synced

    def path_of(self, sha256: str) -> Path:
        """Where the object with this digest lives (it may not exist)."""
        _check_digest(sha256)
        return self.objects / sha256[:2] / sha256[2:]

    def has(self, sha256: str) -> bool:
        """True when the object exists (use ``verify`` to check its bytes)."""
        return self.path_of(sha256).is_file()

    @contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Write many objects with one durability point instead of two fsyncs each.

        Inside the block objects are written to a temporary file and linked into place as always
        (a reader never sees a partial object), but not fsynced one by one. Leaving the block
        normally makes them all durable at once (``syncfs`` of the store's filesystem on Linux,
        else an fsync per object and directory) before the caller can record a receipt naming
        them. A process killed inside the block leaves complete objects (the kernel still holds
        their pages); only a power loss inside it can leave a damaged one, and every read and
        reuse verifies digests, so such an object is found, quarantined and rewritten.
        Nested blocks join the outer one.
        """
        if self._deferred is not None:
            yield
            return
        self._deferred = set()
        try:
            yield
            self._sync_deferred(self._deferred)
            self._record_written(self._deferred)
        finally:
            self._deferred = None

    def _record_written(self, paths: set[Path]) -> None:
        """Tell the ``verified`` cache about objects this block wrote (hashed as they were written),
        so a later process does not hash them again; ones written in the last clock tick are left out."""
        if self._verified_cache is None or not paths:
            return
        now, record = time.time_ns(), []
        for path in paths:
            sha256 = path.parent.name + path.name
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if self._verified.get(sha256) == (st.st_ino, st.st_size, st.st_mtime_ns) and settled_before(st, now):
                record.append((stat_key(st), sha256, path))
        self._verified_cache.put_many(record)

    def _sync_deferred(self, paths: set[Path]) -> None:
        if not paths or _syncfs(self.root):
            return
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for parent in {p.parent for p in paths}:
            fsync_dir(parent)

    @contextmanager
    def _temp(self) -> Iterator[tuple[Path, BinaryIO]]:
        path = self.tmp / f"put-{os.getpid()}-{secrets.token_hex(8)}"
        f = open(path, "xb")  # noqa: SIM115
        try:
            yield path, f
        finally:
            f.close()
            path.unlink(missing_ok=True)

    def _commit(self, tmp_path: Path, sha256: str) -> str:
        final = self.path_of(sha256)
        final.parent.mkdir(exist_ok=True)
        try:
            os.link(tmp_path, final)
        except FileExistsError:
            if self.intact(sha256):  # already present: check it instead of rewriting it
                return sha256
            self.quarantine(sha256)  # the bytes in hand hash right: they replace the damaged copy
            os.link(tmp_path, final)
        if self._deferred is None:
            fsync_dir(final.parent)
        else:
            self._deferred.add(final)
        self._remember(sha256)  # just written from bytes that hashed to this name
        return sha256

    def intact(self, sha256: str) -> bool:
        """True when the object exists and its bytes hash to its name (see ``damaged``)."""
        return not self.damaged([sha256])

    def damaged(self, digests: Iterable[str]) -> list[str]:
        """The digests (first occurrence order) whose object is missing or does not hash to its name.

        An object is hashed unless its current stat identity is known to hold these bytes: in this
        process (inode, size, mtime unchanged since it was written or hashed here) or, with a
        ``verified`` cache, from an earlier process (device, inode, size, mtime and ctime all
        unchanged; any write or chmod moves ctime). Objects to hash are hashed on all cores.
        ``voxledger store verify`` re-hashes regardless.
        """
        bad: list[str] = []
        pending: dict[str, os.stat_result] = {}
        objects = str(self.objects)
        for sha256 in dict.fromkeys(digests):
            _check_digest(sha256)
            try:
                st = os.stat(f"{objects}/{sha256[:2]}/{sha256[2:]}")
            except FileNotFoundError:
                bad.append(sha256)
                continue
            if self._verified.get(sha256) != (st.st_ino, st.st_size, st.st_mtime_ns):
                pending[sha256] = st
        if pending and self._verified_cache is not None:
            known = self._verified_cache.get_many([stat_key(st) for st in pending.values()])
            for sha256, st in list(pending.items()):
                if known.get(stat_key(st)) == sha256:
                    self._verified[sha256] = (st.st_ino, st.st_size, st.st_mtime_ns)
                    del pending[sha256]
        record: list[tuple[StatKey, str, str]] = []
        hashed = map_on_cores(_hash_one, [f"{objects}/{d[:2]}/{d[2:]}" for d in pending])
        for sha256, (actual, st, settled) in zip(pending, hashed, strict=True):
            if actual != sha256:
                self._verified.pop(sha256, None)
                bad.append(sha256)
                continue
            self._verified[sha256] = (st.st_ino, st.st_size, st.st_mtime_ns)
            if settled:
                record.append((stat_key(st), sha256, f"{objects}/{sha256[:2]}/{sha256[2:]}"))
        if record and self._verified_cache is not None:
            self._verified_cache.put_many(record)
        return bad

    def _remember(self, sha256: str) -> None:
        st = self.path_of(sha256).stat()
        self._verified[sha256] = (st.st_ino, st.st_size, st.st_mtime_ns)

    def quarantine(self, sha256: str) -> Path | None:
        """Move a damaged object out of ``objects/`` into ``quarantine/`` (kept as evidence).

        Returns the quarantine path, or None when the object was absent or is in fact intact.
        """
        path = self.path_of(sha256)
        if not path.is_file() or self.intact(sha256):
            return None
        qdir = self.root / "quarantine"
        qdir.mkdir(exist_ok=True)
        dest = qdir / f"{sha256}.{os.getpid()}-{secrets.token_hex(4)}"
        self._verified.pop(sha256, None)
        os.replace(path, dest)
        fsync_dir(path.parent)
        return dest

    def put_bytes(self, data: bytes) -> str:
        """Store bytes; return their sha256. Idempotent; heals a damaged copy of the same object."""
        return self.put_hashed_bytes(data, hashlib.sha256(data).hexdigest())

    def put_hashed_bytes(self, data: bytes, sha256: str) -> str:
        """Store bytes whose sha256 the caller has just computed from this same ``data`` object
        (bytes are immutable), skipping a second hash; otherwise as ``put_bytes``."""
        if self.has(sha256) and self.intact(sha256):
            return sha256
        with self._temp() as (tmp_path, f):
            f.write(data)
            f.flush()
            if self._deferred is None:
                os.fsync(f.fileno())
            os.chmod(tmp_path, 0o444)
            return self._commit(tmp_path, sha256)

    def put_many_bytes(self, items: Iterable[bytes]) -> list[str]:
        """Store many small objects; return their sha256s in order. One ``damaged`` pass over the
        ones already present (a stat each, hashing only what no cache vouches for), the rest
        written in one ``deferred_sync`` block: one durability point, not two fsyncs per object."""
        datas = list(items)
        digests = [hashlib.sha256(d).hexdigest() for d in datas]
        todo = set(self.damaged(digests))
        if todo:
            with self.deferred_sync():
                for data, sha256 in zip(datas, digests, strict=True):
                    if sha256 in todo:
                        todo.discard(sha256)
                        self.put_hashed_bytes(data, sha256)
        return digests

    def put_file(self, path: os.PathLike[str] | str, expected_sha256: str | None = None) -> str:
        """Copy a regular file into the store, hashing while copying; return its sha256.

        Raises DigestMismatchError when ``expected_sha256`` is given and the bytes differ.
        """
        h = hashlib.sha256()
        with self._temp() as (tmp_path, out), open(path, "rb") as src:
            while chunk := src.read(CHUNK_BYTES):
                h.update(chunk)
                out.write(chunk)
            out.flush()
            if self._deferred is None:
                os.fsync(out.fileno())
            sha256 = h.hexdigest()
            if expected_sha256 is not None and expected_sha256 != sha256:
                raise DigestMismatchError(f"{path} changed while being stored: expected {expected_sha256}, read {sha256}")
            os.chmod(tmp_path, 0o444)
            return self._commit(tmp_path, sha256)

    def open(self, sha256: str) -> BinaryIO:
        """Open an object for reading; reading to the end verifies its digest."""
        path = self.path_of(sha256)
        if not path.is_file():
            raise BlobMissingError(f"object {sha256} is not in the store at {self.root}")
        return io.BufferedReader(VerifyingReader(path, sha256), CHUNK_BYTES)

    def get_bytes(self, sha256: str) -> bytes:
        """Read a whole (small) object, verified."""
        with self.open(sha256) as f:
            return f.read()

    def verify(self, sha256: str) -> None:
        """Re-hash an object; raise BlobMissingError or DigestMismatchError naming both digests."""
        path = self.path_of(sha256)
        if not path.is_file():
            raise BlobMissingError(f"object {sha256} is not in the store at {self.root}")
        actual, _ = sha256_stream(path)
        if actual != sha256:
            raise DigestMismatchError(
                f"object {sha256} at {path} is corrupt: its bytes hash to {actual}; restore it from a replica or re-put the original file"
            )

    def size_of(self, sha256: str) -> int:
        """Size in bytes of a stored object."""
        path = self.path_of(sha256)
        if not path.is_file():
            raise BlobMissingError(f"object {sha256} is not in the store at {self.root}")
        return path.stat().st_size

    def iter_digests(self) -> Iterator[str]:
        """Every object digest in the store (unordered)."""
        for sub in self.objects.iterdir():
            if sub.is_dir() and len(sub.name) == 2:
                for obj in sub.iterdir():
                    yield sub.name + obj.name

    def export(self, sha256: str, dest: Path) -> None:
        """Copy an object out to ``dest`` (verified, atomic, refuses to overwrite)."""
        if dest.exists():
            raise VoxledgerError(f"{dest} exists; choose another destination (nothing overwritten)")
        tmp = dest.with_name(f".{dest.name}.tmp-{secrets.token_hex(4)}")
        with self.open(sha256) as src, open(tmp, "xb") as out:
            shutil.copyfileobj(src, out, CHUNK_BYTES)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, dest)  # exclusive: fails rather than replace a file that appeared meanwhile
        except FileExistsError as exc:
            raise VoxledgerError(f"{dest} exists; choose another destination (nothing overwritten)") from exc
        finally:
            tmp.unlink(missing_ok=True)
