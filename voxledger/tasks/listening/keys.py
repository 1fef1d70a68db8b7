"""Secrets of a listening test: the home's HMAC key, pseudonyms, rater tokens, MACs, the sealed key.

The secret key lives in ``<home>/sealed/listening-hmac.key`` and never leaves the home. A rater
token is HMAC(secret, packet digest): only this home can mint one, so a submission for a packet
the home never issued is recognisably foreign. The blinding key (pseudonym -> candidate) is
written to ``<home>/sealed/<commitment>.json``; the packet-set receipt holds only the commitment
(the sha256 of the key's canonical bytes) until aggregation opens it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from voxledger.schemas.canonical import canonical_bytes, sha256_hex
from voxledger.schemas.errors import DigestMismatchError, PacketError
from voxledger.schemas.listening import BlindingKey
from voxledger.stores.home import Home

SECRET_NAME = "listening-hmac.key"
SECRET_BYTES = 32


def sealed_dir(home: Home) -> Path:
    """The home's folder for secrets and sealed keys (created private)."""
    path = home.root / "sealed"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def home_secret(home: Home) -> bytes:
    """The home's listening-test HMAC key, created on first use (32 random bytes, mode 0600)."""
    path = sealed_dir(home) / SECRET_NAME
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        data = path.read_bytes()
        if len(data) != SECRET_BYTES:
            raise PacketError(f"{path} holds {len(data)} bytes, expected {SECRET_BYTES}; restore it from a backup") from None
        return data
    data = secrets.token_bytes(SECRET_BYTES)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return data


def keyed_hex(secret: bytes, *parts: str) -> str:
    """HMAC-SHA256 of the parts joined by ``|`` (hex)."""
    return hmac.new(secret, "|".join(parts).encode("utf-8"), hashlib.sha256).hexdigest()


def pseudonym(secret: bytes, packet_set_id: str, rater_id: str, slot: str, hex_chars: int) -> str:
    """The keyed pseudonym of one slot of one rater's packet (reveals nothing without the secret)."""
    return "s" + keyed_hex(secret, "pseudonym", packet_set_id, rater_id, slot)[:hex_chars]


def rater_token(secret: bytes, packet_sha256: str) -> str:
    """The per-rater token: HMAC of the packet digest under the home's secret."""
    return keyed_hex(secret, "rater-token", packet_sha256)


def tokens_match(secret: bytes, packet_sha256: str, token: str) -> bool:
    """Constant-time check of a token against the packet digest."""
    return hmac.compare_digest(rater_token(secret, packet_sha256), token)


def submission_mac(document: dict[str, Any], token: str) -> str:
    """HMAC-SHA256 (key = token) over the RFC 8785 bytes of the submission without ``mac``.

    The page computes the same value in JavaScript; a file edited after export no longer matches.
    """
    body = {k: v for k, v in document.items() if k != "mac"}
    return hmac.new(token.encode("utf-8"), canonical_bytes(body), hashlib.sha256).hexdigest()


def seal_key(home: Home, key: BlindingKey) -> str:
    """Write the blinding key under ``sealed/`` (read-only) and return its commitment."""
    data = canonical_bytes(key)
    commitment = sha256_hex(data)
    path = sealed_dir(home) / f"{commitment}.json"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o400)
        os.replace(tmp, path)
    return commitment


def open_sealed_key(home: Home, commitment: str) -> tuple[BlindingKey, bytes]:
    """Read the sealed key committed to by ``commitment``; verify it hashes to the commitment."""
    path = sealed_dir(home) / f"{commitment}.json"
    if not path.is_file():
        raise PacketError(f"sealed blinding key {commitment} is not in {path.parent}; aggregate in the home that exported the packets")
    data = path.read_bytes()
    if sha256_hex(data) != commitment:
        raise DigestMismatchError(f"sealed key {path} hashes to {sha256_hex(data)}, not its commitment {commitment}; it was altered")
    try:
        return BlindingKey.model_validate(json.loads(data)), data
    except (json.JSONDecodeError, ValidationError) as exc:
        raise PacketError(f"sealed key {path} is not a valid blinding key: {exc}") from exc
