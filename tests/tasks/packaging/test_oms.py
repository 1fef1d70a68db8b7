"""OMS v1.0 signatures (``package sign``): the model-signing library's own verifier accepts them with no
network, and rejects them after one byte of one file changes, a file is added, or the key differs."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.schemas.errors import SignatureError, UnsafePathError, VoxledgerError
from voxledger.tasks.packaging.attest import write_keypair
from voxledger.tasks.packaging.oms import SIGNATURE_NAME, sign_folder, verify_folder


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every outbound connection attempt fails (and is listed): signing and verifying must not need one."""
    tried: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        tried.append(address)
        raise OSError(f"network is off in this test (tried {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield tried


def _folder(root: Path) -> Path:
    folder = root / "export"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8}\n')
    (folder / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "README.md").write_text("---\nlibrary_name: peft\n---\n# card\n")
    return folder


def _library_verify(folder: Path, pub: Path) -> None:
    from model_signing import verifying

    verifying.Config().use_elliptic_key_verifier(public_key=pub).verify(folder, folder / SIGNATURE_NAME)


def test_the_librarys_own_verifier_accepts_and_rejects_one_changed_byte_or_an_added_file(tmp_path: Path, offline: list[object]) -> None:
    folder = _folder(tmp_path)
    key, pub = write_keypair(tmp_path / "oms", "ecdsa-p256")
    sig = sign_folder(folder, key)
    assert sig == folder / SIGNATURE_NAME
    bundle = json.loads(sig.read_text())
    assert bundle["mediaType"].startswith("application/vnd.dev.sigstore.bundle") and "dsseEnvelope" in bundle
    _library_verify(folder, pub)
    assert verify_folder(folder, pub) == 3
    weights = folder / "adapter_model.safetensors"
    original = weights.read_bytes()
    weights.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
    with pytest.raises(ValueError, match=r"Hash mismatch for \\*'adapter_model\.safetensors"):
        _library_verify(folder, pub)
    with pytest.raises(SignatureError, match="adapter_model.safetensors changed"):
        verify_folder(folder, pub)
    weights.write_bytes(original)
    _library_verify(folder, pub)
    (folder / "extra.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match="Extra files found in model 'export': extra.bin"):
        _library_verify(folder, pub)
    with pytest.raises(SignatureError, match="Extra files found in model 'export': extra.bin"):
        verify_folder(folder, pub)
    assert offline == []


def test_another_key_an_ed25519_key_and_a_second_signature_are_refused(tmp_path: Path, offline: list[object]) -> None:
    folder = _folder(tmp_path)
    key, _ = write_keypair(tmp_path / "a", "ecdsa-p256")
    _, other_pub = write_keypair(tmp_path / "b", "ecdsa-p256")
    ed_key, _ = write_keypair(tmp_path / "ed")
    with pytest.raises(VoxledgerError, match="holds a Ed25519PrivateKey; OMS key signatures take ECDSA"):
        sign_folder(folder, ed_key)
    assert not (folder / SIGNATURE_NAME).exists()
    sign_folder(folder, key)
    with pytest.raises(SignatureError, match="Key mismatch"):
        verify_folder(folder, other_pub)
    before = (folder / SIGNATURE_NAME).read_bytes()
    with pytest.raises(UnsafePathError, match="never overwritten"):
        sign_folder(folder, key)
    assert (folder / SIGNATURE_NAME).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary signature left behind


def test_cli_keygen_sign_verify_and_the_ed25519_attestation_still_works(tmp_path: Path) -> None:
    from tests.tasks.packaging.test_package_archive import good_members
    from voxledger.tasks.packaging.archive import write_package_tar

    runner = CliRunner()
    folder = _folder(tmp_path)

    def run(*args: str) -> tuple[int, str]:
        r = runner.invoke(main, ["--home", str(tmp_path / "h"), *args])
        return r.exit_code, r.output

    assert run("package", "keygen", str(tmp_path / "oms"), "--type", "ecdsa-p256")[0] == 0
    assert run("package", "sign", str(folder), "--key", str(tmp_path / "oms.key"))[0] == 0
    code, out = run("package", "verify", str(folder), "--key", str(tmp_path / "oms.pub"))
    assert code == 0 and "OMS signature" in out and "over 3 file(s)" in out
    (folder / "README.md").write_text("edited\n")
    code, out = run("package", "verify", str(folder), "--key", str(tmp_path / "oms.pub"))
    assert code == 1 and "README.md changed" in out and "Traceback" not in out
    # the ed25519 DSSE attestation of a package tar is untouched
    tar = tmp_path / "p.tar"
    write_package_tar(tar, good_members())
    assert run("package", "keygen", str(tmp_path / "release"))[0] == 0
    assert run("package", "attest", str(tar), "--key", str(tmp_path / "release.key"))[0] == 0
    code, out = run("package", "verify", str(tar), "--key", str(tmp_path / "release.pub"))
    assert code == 0 and "signature verified" in out, out
