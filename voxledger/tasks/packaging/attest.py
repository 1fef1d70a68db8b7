"""Package provenance: an in-toto Statement, an SLSA-provenance-shaped view, DSSE with ed25519.

The Statement's subject is the package tar (by sha256). Its predicate holds our own provenance
(the package manifest and, when the home knows it, the ``package`` receipt) plus ``slsa``: the
fields of SLSA Provenance v1 (``buildDefinition.buildType``, ``resolvedDependencies`` = base model,
adapter checkpoint, plan and data digests, ``runDetails``). Signing wraps the Statement in a DSSE
envelope whose signature covers the DSSE pre-authentication encoding (PAE) of the payload.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import SignatureError, VoxledgerError
from voxledger.schemas.package import PACKAGE_MEDIA_TYPE, PackageManifest

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://voxledger.dev/provenance/package/v1"
BUILD_TYPE = "https://voxledger.dev/buildtypes/package-adapter/v1"
BUILDER_ID = "https://voxledger.dev/builders/package-adapter"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


def _dep(name: str, sha256: str) -> dict[str, Any]:
    return {"name": name, "digest": {"sha256": sha256}}


def slsa_view(manifest: PackageManifest, receipt_id: str | None, receipt: dict[str, Any] | None) -> dict[str, Any]:
    """SLSA Provenance v1 fields describing how the package was built."""
    b = manifest.binding
    deps = [
        _dep("base_model", manifest.components.base_model_sha256),
        _dep("adapter_checkpoint", b.checkpoint_tree_sha256),
        _dep("training_plan", b.plan_sha256),
        _dep("data_manifest", b.data_manifest_sha256),
        _dep("audio_tree", b.audio_tree_sha256),
        _dep("features", b.features_sha256),
    ]
    run: dict[str, Any] = {"builder": {"id": BUILDER_ID}, "metadata": {}}
    if receipt_id and receipt:
        run["metadata"] = {"invocationId": receipt_id, "startedOn": receipt["started_at"], "finishedOn": receipt["finished_at"]}
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "training_run": b.training_run,
                "checkpoint_tree_sha256": b.checkpoint_tree_sha256,
                "promotion_receipt": b.promotion_receipt,
                "evaluation_receipts": list(b.evaluation_receipts),
            },
            "internalParameters": {"code": manifest.code.model_dump(mode="json"), "tools": manifest.inference.tools},
            "resolvedDependencies": deps,
        },
        "runDetails": run,
    }


def package_statement(
    package_sha256: str, name: str, manifest: PackageManifest, receipt_id: str | None = None, receipt: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The in-toto Statement v1 for one package."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": package_sha256}, "annotations": {"mediaType": PACKAGE_MEDIA_TYPE}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "manifest": manifest.model_dump(mode="json"),
            "package_receipt_sha256": receipt_id,
            "package_receipt": receipt,
            "slsa": slsa_view(manifest, receipt_id, receipt),
        },
    }


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _crypto() -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return serialization, ed25519


def key_id(public_key: Any) -> str:
    """sha256 hex of the raw 32-byte ed25519 public key."""
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


KeyType = Literal["ed25519", "ecdsa-p256"]
"""ed25519 signs voxledger's DSSE attestation (`sign_statement`); ECDSA P-256 signs OMS ``model.sig`` (`oms`)."""


def write_keypair(prefix: Path, key_type: KeyType = "ed25519") -> tuple[Path, Path]:
    """Write ``PREFIX.key`` (PKCS#8 PEM, created 0600) and ``PREFIX.pub`` (PEM); refuse to overwrite."""
    from cryptography.hazmat.primitives.asymmetric import ec

    serialization, ed25519 = _crypto()
    private = ed25519.Ed25519PrivateKey.generate() if key_type == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    key_path, pub_path = prefix.with_name(prefix.name + ".key"), prefix.with_name(prefix.name + ".pub")
    for path in (key_path, pub_path):
        if path.exists():
            raise VoxledgerError(f"{path} exists; keys are never overwritten: choose another prefix")
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(key_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # never readable by others, not even briefly
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(key_path, 0o600)  # the umask may have narrowed it further; make the mode exact
    pub_path.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return key_path, pub_path


def _load_key(path: Path, private: bool) -> Any:
    serialization, ed25519 = _crypto()
    data = path.read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=None) if private else serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise VoxledgerError(
            f"{path} is not a PEM {'private' if private else 'public'} key ({exc}); make one with `voxledger package keygen`"
        ) from exc
    wanted = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, wanted):
        raise VoxledgerError(f"{path} holds a {type(key).__name__}; package signatures use ed25519 keys")
    return key


def sign_statement(statement: dict[str, Any], key_path: Path) -> dict[str, Any]:
    """A DSSE envelope around the canonical Statement bytes, signed with an ed25519 private key."""
    private = _load_key(key_path, private=True)
    payload = canonical_bytes(statement)
    sig = private.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": key_id(private.public_key()), "sig": base64.b64encode(sig).decode()}],
    }


def verify_envelope(envelope: dict[str, Any], pub_path: Path, package_sha256: str) -> dict[str, Any]:
    """Check a DSSE envelope against a public key and the package digest; return the Statement.

    Raises: SignatureError when no signature verifies with this key, or the Statement's
    subject is another package.
    """
    from cryptography.exceptions import InvalidSignature

    public = _load_key(pub_path, private=False)
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
        sigs = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
        payload_type = envelope["payloadType"]
    except (KeyError, TypeError, ValueError) as exc:
        raise SignatureError(f"the attestation is not a DSSE envelope ({exc!r})") from exc
    for sig in sigs:
        try:
            public.verify(sig, pae(payload_type, payload))
            break
        except InvalidSignature:
            continue
    else:
        raise SignatureError(
            f"no signature in the envelope verifies with key {pub_path} (key id {key_id(public)}): wrong key, or the statement was altered"
        )
    statement: dict[str, Any] = json.loads(payload)
    subjects = [s["digest"]["sha256"] for s in statement.get("subject", [])]
    if package_sha256 not in subjects:
        raise SignatureError(f"the signed statement is about {subjects}, not package {package_sha256}")
    return statement
