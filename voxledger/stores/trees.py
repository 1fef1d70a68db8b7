"""Directory trees as canonical manifests: sorted relative paths with size, sha256 and exec bit.

The tree digest is the sha256 of the manifest's RFC 8785 bytes, so it depends only on the
relative paths and contents, never on absolute paths, timestamps or listing order.
"""

from __future__ import annotations

import json
import os
import stat
from contextlib import nullcontext
from pathlib import Path, PurePosixPath

from pydantic import Field

from voxledger.schemas.base import Frozen, Sha256
from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import UnsafePathError
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.hashing import StatCache, hash_files

TREE_MEDIA_TYPE = "application/vnd.voxledger.tree+json"


class TreeEntry(Frozen):
    """One file of a tree."""

    path: str = Field(min_length=1)
    size_bytes: int = Field(ge=0)
    sha256: Sha256
    executable: bool


class TreeManifest(Frozen):
    """A directory: entries sorted by path."""

    format: str = "voxledger.tree/v1"
    entries: tuple[TreeEntry, ...]


def check_relative(rel: str, *, root: Path | None = None) -> PurePosixPath:
    """Validate a relative POSIX path: no absolute paths, no ``..``, no empty parts."""
    p = PurePosixPath(rel)
    if p.is_absolute() or rel.startswith("/") or "\\" in rel:
        raise UnsafePathError(f"path {rel!r} is absolute; use a path relative to the tree root")
    if any(part in ("..", "") for part in rel.split("/")) or rel in (".", ""):
        raise UnsafePathError(f"path {rel!r} escapes the tree root ({root or 'tree'}); remove '..' parts")
    return p


def scan_tree(root: Path) -> list[tuple[str, Path, bool]]:
    """List regular files under ``root`` as (relative posix path, absolute path, executable).

    Symlinks that stay inside the tree are followed to their file; symlinks leaving it, FIFOs,
    sockets and devices raise UnsafePathError naming the path.
    """
    root = root.resolve()
    if not root.is_dir():
        raise UnsafePathError(f"{root} is not a directory")
    found: list[tuple[str, Path, bool]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                target = full.resolve()
                if not target.is_relative_to(root):
                    raise UnsafePathError(f"symlink {rel} points outside the tree to {target}; copy the file in instead")
                if target.is_dir():
                    continue  # os.walk does not descend into it; its files are listed under the real path
                st = os.stat(full)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"{rel} is not a regular file (mode {stat.filemode(st.st_mode)}); remove it from the tree")
            found.append((rel, full, bool(st.st_mode & stat.S_IXUSR)))
    return found


def build_manifest(root: Path, *, cache: StatCache | None = None, workers: int | None = None) -> TreeManifest:
    """Hash every file under ``root`` (in parallel, stat-cached) into a canonical manifest."""
    return _manifest_of(scan_tree(root), cache=cache, workers=workers)


def _manifest_of(files: list[tuple[str, Path, bool]], *, cache: StatCache | None = None, workers: int | None = None) -> TreeManifest:
    digests = hash_files([f for _, f, _ in files], cache=cache, workers=workers)
    entries = [TreeEntry(path=rel, size_bytes=full.stat().st_size, sha256=digests[full], executable=exe) for rel, full, exe in files]
    entries.sort(key=lambda e: e.path)
    return TreeManifest(entries=tuple(entries))


def manifest_bytes(manifest: TreeManifest) -> bytes:
    """Canonical bytes of a manifest (what the tree digest is the sha256 of)."""
    return canonical_bytes(manifest)


def put_tree(store: LocalBlobStore, root: Path, *, cache: StatCache | None = None) -> tuple[str, TreeManifest]:
    """Store every file of a directory plus its manifest; return (tree digest, manifest)."""
    files = scan_tree(root)
    manifest = _manifest_of(files, cache=cache)
    by_rel = {rel: full for rel, full, _ in files}
    batch = getattr(store, "deferred_sync", None)  # one durability point for the whole tree (local store)
    with batch() if batch is not None else nullcontext():
        todo = set(store.damaged(e.sha256 for e in manifest.entries))  # absent, or damaged: the file in hand heals it
        for entry in manifest.entries:
            if entry.sha256 in todo:
                store.put_file(by_rel[entry.path], expected_sha256=entry.sha256)
                todo.discard(entry.sha256)
        digest = store.put_bytes(manifest_bytes(manifest))
    return digest, manifest


def damaged_objects(store: LocalBlobStore, sha256: str, media_type: str) -> list[str]:
    """Digests of the objects behind an artifact that are missing or do not hash right.

    A tree artifact is checked whole: its manifest and every file it lists.
    """
    if not store.intact(sha256):
        return [sha256]
    if media_type != TREE_MEDIA_TYPE:
        return []
    return store.damaged(e.sha256 for e in load_manifest(store, sha256).entries)


def load_manifest(store: LocalBlobStore, tree_sha256: str) -> TreeManifest:
    """Read and validate a tree manifest from the store."""
    doc = json.loads(store.get_bytes(tree_sha256))
    manifest = TreeManifest.model_validate(doc)
    for entry in manifest.entries:
        check_relative(entry.path)
    return manifest


def materialize_tree(store: LocalBlobStore, tree_sha256: str, dest: Path) -> None:
    """Write a stored tree out under ``dest`` (which must not exist), every file verified."""
    manifest = load_manifest(store, tree_sha256)
    dest.mkdir(parents=True)
    for entry in manifest.entries:
        target = dest / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        store.export(entry.sha256, target)
        if entry.executable:
            target.chmod(0o755)
