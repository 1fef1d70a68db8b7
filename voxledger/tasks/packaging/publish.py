"""Publication into a retention root: no overwrite, no partial file under a final name.

Protocol: copy into ``<root>/.incoming/<name>.<pid>.<random>`` while hashing, fsync, check the
digest, then hard-link the temporary file to ``<root>/<name>`` (a link fails when the name exists,
so nothing is ever replaced), fsync the directory and drop the temporary name. A publisher killed
at any moment leaves at most a stray file under ``.incoming/``; the final name either does not
exist or holds the complete, verified bytes. Stray files of dead publishers are swept on the next
publication. An existing final name with the same bytes is accepted (idempotent); with different
bytes it is refused, naming both digests.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from voxledger.schemas.errors import DigestMismatchError, UnsafePathError, VoxledgerError
from voxledger.stores.blobs import fsync_dir
from voxledger.stores.hashing import sha256_file
from voxledger.tasks.processes import pid_alive as _alive

INCOMING = ".incoming"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
_TEMP = re.compile(r"^(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{16}$")


@dataclass(frozen=True)
class Published:
    """Where the file is now and whether an identical copy was already there."""

    path: Path
    sha256: str
    already_present: bool


def sweep_incoming(root: Path) -> list[str]:
    """Remove temporary files left by publishers that are no longer running; return their names."""
    incoming = root / INCOMING
    removed: list[str] = []
    if not incoming.is_dir():
        return removed
    for entry in sorted(incoming.iterdir()):
        m = _TEMP.match(entry.name)
        if m and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed


def _check_existing(final: Path, sha256: str) -> Published:
    existing = sha256_file(final)
    if existing != sha256:
        raise DigestMismatchError(
            f"{final} already exists with different bytes: it holds {existing}, the new package is {sha256}; "
            "published files are never overwritten: remove or rename the old file deliberately, or publish elsewhere"
        )
    return Published(final, sha256, already_present=True)


def publish_file(src: Path, sha256: str, root: Path, name: str) -> Published:
    """Publish ``src`` (whose bytes must hash to ``sha256``) as ``root/name``, atomically.

    Raises: UnsafePathError for a name that is not a plain file name; DigestMismatchError when
    ``src`` does not hash to ``sha256`` or ``root/name`` exists with other bytes; VoxledgerError
    when the filesystem cannot hard-link (publication needs it to be exclusive and atomic).
    """
    if not _NAME.match(name):
        raise UnsafePathError(f"publication name {name!r} must be a plain file name (letters, digits, '.', '_', '-')")
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    if final.exists():
        return _check_existing(final, sha256)
    incoming = root / INCOMING
    incoming.mkdir(exist_ok=True)
    sweep_incoming(root)
    tmp = incoming / f"{name}.{os.getpid()}.{secrets.token_hex(8)}"
    try:
        h = hashlib.sha256()
        with open(src, "rb") as f, open(tmp, "xb") as out:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != sha256:
            raise DigestMismatchError(f"{src} hashes to {h.hexdigest()}, expected {sha256}: it changed while being published")
        os.chmod(tmp, 0o444)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return _check_existing(final, sha256)  # a concurrent publisher won the race
        except OSError as exc:
            raise VoxledgerError(f"cannot hard-link into {root} ({exc}); publish onto a local POSIX filesystem") from exc
        fsync_dir(root)
    finally:
        tmp.unlink(missing_ok=True)
    return Published(final, sha256, already_present=False)
