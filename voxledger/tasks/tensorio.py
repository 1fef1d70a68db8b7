"""Byte-reproducible safetensors files.

safetensors serialises its header from a hash map, so the order of ``__metadata__`` keys (and
therefore the file's bytes and digest) can change from one process to the next even for equal
tensors. ``save_deterministic`` rewrites the header with sorted keys, same length, so equal
tensors and metadata always give equal bytes.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import torch
from safetensors.torch import save


def deterministic_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """safetensors bytes with a canonical (sorted, compact) header."""
    raw = save({k: v.detach().contiguous() for k, v in tensors.items()}, metadata=metadata)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    canon = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    if len(canon) > n:
        raise ValueError("canonical safetensors header is longer than the original; cannot rewrite in place")
    out: bytes = raw[:8] + canon + b" " * (n - len(canon)) + raw[8 + n :]
    return out


def save_deterministic(tensors: dict[str, torch.Tensor], path: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write ``deterministic_bytes`` to ``path``."""
    Path(path).write_bytes(deterministic_bytes(tensors, metadata))
