"""Deterministic package tars, safe reading and member verification (no model needed)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import DigestMismatchError, UnsafePathError
from voxledger.schemas.package import (
    ComponentDigests,
    InferenceSettings,
    PackageBinding,
    PackageManifest,
    PackageMember,
)
from voxledger.stores.identity import code_identity
from voxledger.tasks.packaging.archive import (
    iter_members,
    unpack_package,
    verify_package,
    write_package_tar,
)

H = "ab" * 32


def manifest_for(members: dict[str, bytes]) -> bytes:
    listed = tuple(PackageMember(path=n, role="receipt" if n.startswith("receipts/") else "adapter_weights",
                                 sha256=hashlib.sha256(b).hexdigest(), size_bytes=len(b)) for n, b in sorted(members.items()))  # fmt: skip
    manifest = PackageManifest(
        name="t", backend="tiny", components=ComponentDigests(base_model_sha256=H, note="test"),
        binding=PackageBinding(training_run=H, checkpoint_receipt=H, checkpoint_tree_sha256=H, audit_receipt=H, plan_sha256=H,
                               data_manifest_sha256=H, audio_tree_sha256=H, features_sha256=H),
        inference=InferenceSettings(speaker="s", sample_rate_hz=16000), code=code_identity(), members=listed,
    )  # fmt: skip
    return canonical_bytes(manifest)


def good_members() -> dict[str, bytes]:
    receipt = b'{"kind":"x"}'
    members = {"adapter/adapter.safetensors": b"\x00weights" * 100, f"receipts/{hashlib.sha256(receipt).hexdigest()}.json": receipt}
    return {**members, "manifest.json": manifest_for(members)}


def test_tar_bytes_depend_only_on_names_and_contents(tmp_path: Path) -> None:
    members = good_members()
    a = write_package_tar(tmp_path / "a.tar", members)
    # the same contents from files with other mtimes and modes, given in another order
    files: dict[str, Path | bytes] = {}
    for i, (name, data) in enumerate(reversed(list(members.items()))):
        f = tmp_path / f"src{i}"
        f.write_bytes(data)
        os.chmod(f, 0o700)
        os.utime(f, (1_000_000 + i, 2_000_000 + i))
        files[name] = f
    b = write_package_tar(tmp_path / "b.tar", files)
    assert a == b
    with tarfile.open(tmp_path / "a.tar") as tar:
        infos = tar.getmembers()
    assert [i.name for i in infos] == sorted(members)
    assert {(i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) for i in infos} == {(0, 0, 0, "", "", 0o644)}
    with pytest.raises(FileExistsError):
        write_package_tar(tmp_path / "a.tar", members)  # exclusive create


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,8}(/[a-z0-9_.]{1,8})?", fullmatch=True), st.binary(max_size=600), min_size=1, max_size=6))
def test_members_round_trip(members: dict[str, bytes]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.tar"
        digest = write_package_tar(path, dict(members))
        assert dict(iter_members(path)) == members
        assert digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_verify_names_every_tampered_member(tmp_path: Path) -> None:
    members = good_members()
    write_package_tar(tmp_path / "ok.tar", members)
    assert verify_package(tmp_path / "ok.tar").manifest.name == "t"
    bad = dict(members)
    bad["adapter/adapter.safetensors"] = members["adapter/adapter.safetensors"][:-1] + b"\x01"
    bad["extra.bin"] = b"sneaked in"
    write_package_tar(tmp_path / "bad.tar", bad)
    with pytest.raises(DigestMismatchError) as err:
        verify_package(tmp_path / "bad.tar")
    assert "adapter/adapter.safetensors: hashes to" in str(err.value)
    assert "extra.bin: present in the tar but not listed" in str(err.value)
    missing = {k: v for k, v in members.items() if not k.startswith("receipts/")}
    write_package_tar(tmp_path / "missing.tar", missing)
    with pytest.raises(DigestMismatchError, match=r"receipts/.*listed in the manifest but missing"):
        verify_package(tmp_path / "missing.tar")


def test_an_edited_manifest_is_refused(tmp_path: Path) -> None:
    members = good_members()
    doc = json.loads(members["manifest.json"])
    members["manifest.json"] = json.dumps(doc, indent=1).encode()  # same content, not canonical
    write_package_tar(tmp_path / "p.tar", members)
    with pytest.raises(DigestMismatchError, match="not in canonical form"):
        verify_package(tmp_path / "p.tar")


def _raw_tar(path: Path, info: tarfile.TarInfo, data: bytes = b"") -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


@pytest.mark.parametrize(
    ("name", "kind", "message"),
    [
        ("link", tarfile.SYMTYPE, "is a symlink"),
        ("hard", tarfile.LNKTYPE, "is a hard link"),
        ("dev", tarfile.CHRTYPE, "is a character device"),
        ("blk", tarfile.BLKTYPE, "is a block device"),
        ("fifo", tarfile.FIFOTYPE, "is a FIFO"),
        ("/etc/passwd", tarfile.REGTYPE, "is absolute"),
        ("adapter/../../escape", tarfile.REGTYPE, "escapes the tree root"),
    ],
)
def test_unsafe_members_are_refused_before_anything_is_written(tmp_path: Path, name: str, kind: bytes, message: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    data = b"x" if kind == tarfile.REGTYPE else b""
    info.size = len(data)
    _raw_tar(tmp_path / "evil.tar", info, data)
    with pytest.raises(UnsafePathError, match=message):
        unpack_package(tmp_path / "evil.tar", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape").exists()


def test_duplicates_and_compressed_or_foreign_files_are_refused(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "dup.tar", "w") as tar:
        for data in (b"a", b"b"):
            info = tarfile.TarInfo("adapter/x")
            info.size = 1
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(UnsafePathError, match="appears twice"):
        verify_package(tmp_path / "dup.tar")
    with tarfile.open(tmp_path / "c.tar.gz", "w:gz") as tar:
        tar.addfile(tarfile.TarInfo("a"), io.BytesIO(b""))
    with pytest.raises(UnsafePathError, match="not an uncompressed tar package"):
        verify_package(tmp_path / "c.tar.gz")
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 40)
    with pytest.raises(UnsafePathError, match="not an uncompressed tar"):
        verify_package(tmp_path / "junk.tar")


def test_a_sparse_or_oversized_member_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """An 8 GiB sparse member (10 KiB of tar) was read into memory: 'unexpected MemoryError'. Now its header
    is refused first; so is a plain member whose header claims more bytes than the archive holds."""
    import subprocess

    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(8 * 1024**3)  # a hole: no block is written
    subprocess.run(["tar", "--sparse", "-cf", str(tmp_path / "sparse.tar"), "-C", str(tmp_path), "big"], check=True)
    big.unlink()
    assert (tmp_path / "sparse.tar").stat().st_size < 100_000
    with pytest.raises(UnsafePathError, match="'big' is a sparse file"):
        list(iter_members(tmp_path / "sparse.tar"))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"{}\n"))
    data = bytearray(raw.getvalue())
    data[124:136] = b"%011o\0" % (2**33 - 1)  # the size field (11 octal digits at most) now claims 8 GiB
    data[148:156] = b"        "
    data[148:156] = b"%06o\0 " % sum(data[:512])  # a valid header checksum, so only the size is wrong
    (tmp_path / "claims.tar").write_bytes(bytes(data))
    with pytest.raises(UnsafePathError, match="claims 8,589,934,591 bytes but the archive holds"):
        list(iter_members(tmp_path / "claims.tar"))
