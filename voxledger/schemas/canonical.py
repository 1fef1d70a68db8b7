"""Canonical JSON (RFC 8785 / JCS) and the digests built on it.

Every identity in voxledger (receipt ids, plan digests, tree digests, cache keys) is the sha256 of
RFC 8785 canonical bytes, so key order, whitespace and comments never change an identity.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import rfc8785
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def canonical_bytes(value: Any) -> bytes:
    """Return RFC 8785 canonical JSON bytes for a JSON value or a pydantic model.

    Raises:
        TypeError / rfc8785.CanonicalizationError: the value holds a non-JSON type or a float
        that JSON cannot carry (NaN, Infinity).
    """
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    else:
        value = to_jsonable_python(value)  # nested models, tuples, enums -> plain JSON values
    return rfc8785.dumps(value)


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of a byte string."""
    return hashlib.sha256(data).hexdigest()


def canonical_digest(value: Any) -> str:
    """sha256 hex of the canonical JSON of ``value``."""
    return sha256_hex(canonical_bytes(value))


def is_sha256_hex(text: str) -> bool:
    """True when ``text`` is a full, lower-case, 64-character sha256 hex digest."""
    return bool(SHA256_HEX.match(text))
