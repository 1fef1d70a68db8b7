"""OpenSSF model signing (OMS v1.0) over a folder: ``model.sig`` that ``model_signing verify key`` checks.

The signature is a Sigstore bundle holding a DSSE envelope over an in-toto Statement whose
predicate lists every file of the folder with its sha256; it is made and checked by the
``model-signing`` library itself (never hand-built), signed with an ECDSA P-256 key
(`voxledger package keygen --type ecdsa-p256`). It sits inside the folder it signs and is left
out of what it signs. Nothing here touches the network: key signing needs no Sigstore instance.
voxledger's own ed25519 DSSE attestation of a package tar (`attest`) is a separate, richer
statement; the two live side by side.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from voxledger.schemas.errors import SignatureError, UnsafePathError, VoxledgerError

SIGNATURE_NAME = "model.sig"


def _check_key(path: Path, private: bool) -> None:
    """Refuse anything but a PEM EC key on a curve OMS key signing takes, naming the file and the fix."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = path.read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=None) if private else serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise VoxledgerError(
            f"{path} is not an unencrypted PEM {'private' if private else 'public'} key ({exc}); "
            "make one with `voxledger package keygen PREFIX --type ecdsa-p256`"
        ) from exc
    wanted = ec.EllipticCurvePrivateKey if private else ec.EllipticCurvePublicKey
    if not isinstance(key, wanted) or key.curve.name not in ("secp256r1", "secp384r1", "secp521r1"):
        raise VoxledgerError(
            f"{path} holds a {type(key).__name__}; OMS key signatures take ECDSA P-256/384/521 keys: "
            "make one with `voxledger package keygen PREFIX --type ecdsa-p256` (ed25519 keys sign `package attest`)"
        )


def _hashing() -> Any:
    """Every file of the folder but its signature (and git's files, as `model_signing sign` leaves them out)."""
    from model_signing import hashing

    return hashing.Config().set_ignored_paths(paths=[SIGNATURE_NAME], ignore_git_paths=True)  # type: ignore[no-untyped-call]


def sign_folder(folder: Path, private_key: Path) -> Path:
    """Write ``folder/model.sig`` (OMS v1.0, ECDSA) over every other file of ``folder``; return its path.

    Raises: UnsafePathError (not a folder, or it already holds a signature: never overwritten),
    VoxledgerError (the key is not an EC private key).
    """
    from model_signing import signing

    if not folder.is_dir():
        raise UnsafePathError(f"{folder} is not a folder; OMS signatures cover a folder (`package export`, or an unpacked package)")
    dest = folder / SIGNATURE_NAME
    if dest.exists():
        raise UnsafePathError(f"{dest} exists; signatures are never overwritten: move it away to sign again")
    _check_key(private_key, private=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{folder.name}.", suffix=".sig", dir=folder.absolute().parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:  # signed outside the folder, then moved in: the folder never holds a half-written signature
        signing.Config().use_elliptic_key_signer(private_key=private_key).set_hashing_config(_hashing()).sign(folder, tmp)  # type: ignore[no-untyped-call]
        os.link(tmp, dest)  # fails rather than replace a signature written meanwhile
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def verify_folder(folder: Path, public_key: Path, signature: Path | None = None) -> int:
    """Check an OMS signature over ``folder`` with the library's own verifier; return how many files it covers.

    Raises SignatureError naming what differs (a changed, added or missing file, or the wrong key).
    """
    from model_signing import verifying

    sig = signature or folder / SIGNATURE_NAME
    if not sig.is_file():
        raise SignatureError(f"no OMS signature at {sig}; sign the folder with `voxledger package sign {folder} --key KEY`")
    _check_key(public_key, private=False)
    try:
        verifying.Config().use_elliptic_key_verifier(public_key=public_key).verify(folder, sig)  # type: ignore[no-untyped-call]
    except ValueError as exc:  # the library reports every mismatch and a bad signature as ValueError
        raise SignatureError(f"OMS signature {sig} does not verify over {folder} with key {public_key}: {_readable(str(exc))}") from exc
    return sum(1 for p in folder.rglob("*") if p.is_file() and p.name != SIGNATURE_NAME)


def _readable(message: str) -> str:
    """The library's mismatch report without its digest reprs: which files changed, appeared or vanished."""
    changed = re.findall(r"Hash mismatch for \\*'([^'\\]+)\\*'", message)  # the library quotes inside a list's repr
    moved = re.findall(r"((?:Extra|Missing) files (?:found )?in model '[^']*': [^'\"\]]+)", message)
    parts = [*(f"{name} changed" for name in changed), *moved]
    return "; ".join(parts) if parts else message
