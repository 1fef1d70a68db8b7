"""Key pairs, DSSE envelopes and the in-toto statement of a package (no model needed)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from tests.tasks.packaging.test_package_archive import good_members
from voxledger.schemas.errors import SignatureError, VoxledgerError
from voxledger.tasks.packaging.archive import verify_package, write_package_tar
from voxledger.tasks.packaging.attest import (
    BUILD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    package_statement,
    pae,
    sign_statement,
    verify_envelope,
    write_keypair,
)


@pytest.fixture
def package(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "p.tar"
    return path, write_package_tar(path, good_members())


def test_keygen_writes_a_0600_private_key_and_never_overwrites(tmp_path: Path) -> None:
    key, pub = write_keypair(tmp_path / "release")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in key.read_bytes() and b"PUBLIC KEY" in pub.read_bytes()
    with pytest.raises(VoxledgerError, match="never overwritten"):
        write_keypair(tmp_path / "release")


def test_statement_shape(package: tuple[Path, str]) -> None:
    path, sha = package
    st = package_statement(sha, path.name, verify_package(path).manifest)
    assert st["_type"] == STATEMENT_TYPE and st["predicateType"] == PREDICATE_TYPE
    assert st["subject"] == [
        {"name": "p.tar", "digest": {"sha256": sha}, "annotations": {"mediaType": "application/vnd.voxledger.package+tar"}}
    ]
    build = st["predicate"]["slsa"]["buildDefinition"]
    assert build["buildType"] == BUILD_TYPE
    assert [d["name"] for d in build["resolvedDependencies"]] == [
        "base_model",
        "adapter_checkpoint",
        "training_plan",
        "data_manifest",
        "audio_tree",
        "features",
    ]


def test_dsse_sign_then_verify_and_every_forgery_fails(tmp_path: Path, package: tuple[Path, str]) -> None:
    path, sha = package
    key, pub = write_keypair(tmp_path / "k")
    _, other_pub = write_keypair(tmp_path / "other")
    env = sign_statement(package_statement(sha, path.name, verify_package(path).manifest), key)
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert verify_envelope(env, pub, sha)["subject"][0]["digest"]["sha256"] == sha
    with pytest.raises(SignatureError, match="no signature in the envelope verifies"):
        verify_envelope(env, other_pub, sha)
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    forged = {**env, "payload": base64.b64encode(json.dumps(statement).encode()).decode()}
    with pytest.raises(SignatureError, match="no signature"):
        verify_envelope(forged, pub, sha)
    with pytest.raises(SignatureError, match="not package"):
        verify_envelope(env, pub, "1" * 64)  # a valid signature over another package
    with pytest.raises(SignatureError, match="not a DSSE envelope"):
        verify_envelope({"payload": "!!"}, pub, sha)


def test_pae_matches_the_dsse_spec() -> None:
    # DSSE v1 protocol document: PAE("http://example.com/HelloWorld", "hello world")
    assert pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
