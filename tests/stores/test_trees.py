"""Tree manifests: canonical digests, unsafe paths, stat cache, materialisation."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from voxledger.schemas.errors import UnsafePathError
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.hashing import SETTLE_NS, StatCache, hash_files, stat_key
from voxledger.stores.trees import build_manifest, check_relative, materialize_tree, put_tree


def _make_tree(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x.txt").write_text("x")
    (root / "top.bin").write_bytes(b"\x00\x01")
    tool = root / "run.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)


def test_tree_digest_ignores_location_and_order(tmp_path: Path) -> None:
    _make_tree(tmp_path / "one")
    _make_tree(tmp_path / "two")
    m1, m2 = build_manifest(tmp_path / "one"), build_manifest(tmp_path / "two")
    assert m1 == m2
    assert [e.path for e in m1.entries] == ["a/b/x.txt", "run.sh", "top.bin"]
    assert [e.executable for e in m1.entries] == [False, True, False]


def test_tree_digest_changes_with_content_name_and_mode(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "s")
    _make_tree(tmp_path / "t")
    base, _ = put_tree(store, tmp_path / "t")
    (tmp_path / "t" / "top.bin").write_bytes(b"\x00\x02")
    changed, _ = put_tree(store, tmp_path / "t")
    (tmp_path / "t" / "run.sh").chmod(0o644)
    mode_changed, _ = put_tree(store, tmp_path / "t")
    assert len({base, changed, mode_changed}) == 3


def test_round_trip_materialize(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "s")
    _make_tree(tmp_path / "t")
    digest, _ = put_tree(store, tmp_path / "t")
    materialize_tree(store, digest, tmp_path / "copy")
    assert (tmp_path / "copy" / "a" / "b" / "x.txt").read_text() == "x"
    assert os.access(tmp_path / "copy" / "run.sh", os.X_OK)
    assert put_tree(store, tmp_path / "copy")[0] == digest


def test_symlink_leaving_tree_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "secret").write_text("s")
    (tmp_path / "t" / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePathError, match="link points outside the tree"):
        build_manifest(tmp_path / "t")


def test_symlink_inside_tree_is_followed(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "real").write_text("r")
    (tmp_path / "t" / "alias").symlink_to(tmp_path / "t" / "real")
    assert [e.path for e in build_manifest(tmp_path / "t").entries] == ["alias", "real"]


def test_special_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    os.mkfifo(tmp_path / "t" / "pipe")
    with pytest.raises(UnsafePathError, match="pipe is not a regular file"):
        build_manifest(tmp_path / "t")


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../b", "a//b", "."])
def test_relative_path_traversal_rejected(bad: str) -> None:
    with pytest.raises(UnsafePathError, match="path"):
        check_relative(bad)


def test_stat_cache_serves_unchanged_and_rehashes_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.stores import hashing

    files = []
    for i in range(30):
        p = tmp_path / f"f{i}"
        p.write_bytes(os.urandom(100))
        files.append(p)
    time.sleep(2 * SETTLE_NS / 1e9)  # past the clock tick the files were written in (see the next test)
    cache = StatCache(tmp_path / "cache.sqlite")
    reads: list[Path] = []
    real = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda p: reads.append(p) or real(p))
    first = hash_files(files, cache=cache, workers=2)
    assert len(reads) == 30
    assert first == {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}  # each digest lands on its own path
    reads.clear()
    assert hash_files(files, cache=cache) == first
    assert reads == [], "unchanged files were read again despite the stat cache"
    files[3].write_bytes(b"changed")
    again = hash_files(files, cache=cache)
    assert reads == [files[3]]
    assert again[files[3]] != first[files[3]]


def test_a_file_stat_in_its_own_write_tick_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a rewrite within the same coarse clock tick would keep mtime and ctime: such a stat is never trusted
    from voxledger.stores import hashing

    p = tmp_path / "fresh"
    p.write_bytes(b"one")
    cache = StatCache(tmp_path / "cache.sqlite")
    hash_files([p], cache=cache)
    assert cache.get_many([stat_key(os.stat(p))]) == {}
    reads: list[Path] = []
    real = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda q: reads.append(q) or real(q))
    time.sleep(2 * SETTLE_NS / 1e9)
    hash_files([p], cache=cache)
    assert reads == [p] and cache.get_many([stat_key(os.stat(p))]) != {}


@settings(max_examples=200, deadline=None)
@given(
    entries=hs.lists(
        hs.tuples(hs.text(min_size=1, max_size=30), hs.integers(0, 2**53 + 5), hs.booleans(), hs.binary(min_size=1, max_size=8)),
        max_size=12,
    )
)
def test_manifest_bytes_are_rfc8785_bytes(entries: list[tuple[str, int, bool, bytes]]) -> None:
    from voxledger.schemas.canonical import canonical_bytes
    from voxledger.stores.trees import TreeEntry, TreeManifest, manifest_bytes

    manifest = TreeManifest(
        entries=tuple(TreeEntry(path=p, size_bytes=n, executable=x, sha256=hashlib.sha256(b).hexdigest()) for p, n, x, b in entries)
    )
    try:
        expected = canonical_bytes(manifest)
    except Exception as exc:  # sizes past 2**53 - 1: both refuse alike
        with pytest.raises(type(exc)):
            manifest_bytes(manifest)
        return
    assert manifest_bytes(manifest) == expected
