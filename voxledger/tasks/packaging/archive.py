"""Deterministic package tars: writing, safe reading, safe unpacking and member verification.

Writing: USTAR, no compression, entries sorted by path, every header fixed (mtime 0, uid/gid 0,
empty user and group names, mode 0644, regular files only), so the tar bytes are a pure function
of the member names and contents. Reading accepts only what we write: regular files with safe
relative names, each name once. Symlinks, hard links, devices, FIFOs, directories, absolute paths
and ``..`` are refused with the member's name, and nothing is written outside the destination.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from voxledger.schemas.errors import DigestMismatchError, UnsafePathError
from voxledger.schemas.package import MANIFEST_NAME, PackageManifest
from voxledger.stores.hashing import sha256_file
from voxledger.stores.trees import check_relative

FILE_MODE = 0o644
_KINDS = {
    tarfile.SYMTYPE: "a symlink",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.DIRTYPE: "a directory",
}


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.type = size, 0, FILE_MODE, tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_package_tar(dest: Path, members: dict[str, Path | bytes]) -> str:
    """Write a deterministic tar of ``members`` (name -> file or bytes) to ``dest``; return its sha256.

    ``dest`` must not exist (exclusive create). The file is fsynced before this returns.
    """
    for name in members:
        check_relative(name)
    with open(dest, "xb") as raw:
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name in sorted(members):
                src = members[name]
                if isinstance(src, bytes):
                    tar.addfile(_info(name, len(src)), io.BytesIO(src))
                else:
                    with open(src, "rb") as f:
                        tar.addfile(_info(name, os.fstat(f.fileno()).st_size), f)
        raw.flush()
        os.fsync(raw.fileno())
    return sha256_file(dest)


def check_member(info: tarfile.TarInfo, package: Path) -> str:
    """The member's safe relative name; UnsafePathError for anything but a plain regular file."""
    kind = _KINDS.get(info.type)
    if kind is None and not info.isreg():
        kind = f"an entry of tar type {info.type!r}"
    if kind is not None:
        raise UnsafePathError(f"package {package}: member {info.name!r} is {kind}; packages hold regular files only")
    try:
        check_relative(info.name)
    except UnsafePathError as exc:
        raise UnsafePathError(f"package {package}: member {info.name!r} is refused: {exc}") from exc
    return info.name


@contextmanager
def open_package(path: Path) -> Iterator[tarfile.TarFile]:
    """Open an uncompressed package tar; UnsafePathError when it is not one."""
    try:
        tar = tarfile.open(path, mode="r:")  # noqa: SIM115 (closed by the with block below)
    except (tarfile.TarError, OSError) as exc:
        raise UnsafePathError(f"{path} is not an uncompressed tar package ({exc}); give the .tar file that `package build` wrote") from exc
    with tar:
        yield tar


def iter_members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every member, checked to be safe and unique, in archive order.

    Sizes are checked before any byte is read: a sparse member (whose declared size is not in the file)
    and a member claiming more bytes than the archive holds are refused, so a crafted header cannot
    make a read of gigabytes that were never there.
    """
    seen: set[str] = set()
    archive_bytes = path.stat().st_size
    with open_package(path) as tar:
        for info in tar:
            name = check_member(info, path)
            if info.issparse():
                raise UnsafePathError(f"package {path}: member {name!r} is a sparse file; packages hold plain regular files only")
            if info.size > archive_bytes:
                raise UnsafePathError(
                    f"package {path}: member {name!r} claims {info.size:,} bytes but the archive holds {archive_bytes:,}: "
                    "a damaged or crafted header; rebuild the package with `package build`"
                )
            if name in seen:
                raise UnsafePathError(f"package {path}: member {name!r} appears twice; a package names each file once")
            seen.add(name)
            f = tar.extractfile(info)
            if f is None:
                raise UnsafePathError(f"package {path}: member {name!r} has no readable data")
            yield name, f.read()


def read_manifest(data: bytes, package: Path) -> PackageManifest:
    """Parse and validate ``manifest.json`` bytes; DigestMismatchError when they are not canonical."""
    from voxledger.schemas.canonical import canonical_bytes

    try:
        manifest = PackageManifest.model_validate(json.loads(data))
    except (ValueError, ValidationError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:400]
        raise DigestMismatchError(f"package {package}: {MANIFEST_NAME} is not a valid package manifest: {detail}") from exc
    if canonical_bytes(manifest) != data:
        raise DigestMismatchError(f"package {package}: {MANIFEST_NAME} is not in canonical form: it was edited after packaging")
    return manifest


@dataclass(frozen=True)
class Verified:
    """A package whose members all match its manifest."""

    sha256: str
    manifest: PackageManifest
    manifest_bytes: bytes
    contents: dict[str, bytes]


def verify_package(path: Path) -> Verified:
    """Re-hash every member against the manifest; raise once, naming every file that differs.

    Receipt members must also hash to the id in their own name (``receipts/<id>.json``).
    Raises: UnsafePathError (unsafe or foreign member), DigestMismatchError (what differs).
    """
    contents = dict(iter_members(path))
    if MANIFEST_NAME not in contents:
        raise DigestMismatchError(f"package {path} has no {MANIFEST_NAME}; it was not written by `package build`")
    manifest = read_manifest(contents[MANIFEST_NAME], path)
    problems: list[str] = []
    listed = {m.path: m for m in manifest.members}
    for name in sorted(set(contents) - set(listed) - {MANIFEST_NAME}):
        problems.append(f"{name}: present in the tar but not listed in the manifest")
    for name, member in sorted(listed.items()):
        if name not in contents:
            problems.append(f"{name}: listed in the manifest but missing from the tar")
            continue
        actual = hashlib.sha256(contents[name]).hexdigest()
        if actual != member.sha256 or len(contents[name]) != member.size_bytes:
            problems.append(
                f"{name}: hashes to {actual} ({len(contents[name])} bytes), manifest says {member.sha256} ({member.size_bytes} bytes)"
            )
        if member.role == "receipt" and name != f"receipts/{actual}.json":
            problems.append(f"{name}: a receipt member must be named receipts/<its sha256>.json, its bytes hash to {actual}")
    if problems:
        raise DigestMismatchError(f"package {path}: {len(problems)} member(s) differ from the manifest:\n  " + "\n  ".join(problems))
    return Verified(sha256_file(path), manifest, contents[MANIFEST_NAME], contents)


def unpack_package(path: Path, dest: Path) -> Verified:
    """Verify the package, then write its members under ``dest`` (created; must not exist)."""
    verified = verify_package(path)
    dest.mkdir(parents=True)
    root = dest.resolve()
    for name, data in sorted(verified.contents.items()):
        target = (root / name).resolve()
        if not target.is_relative_to(root):
            raise UnsafePathError(f"package {path}: member {name!r} would land outside {dest}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as f:
            f.write(data)
    return verified
