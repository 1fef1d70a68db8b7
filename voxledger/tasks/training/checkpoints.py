"""Guarded working checkpoints: everything needed to continue a run bit-for-bit.

A checkpoint folder holds the trainable weights (safetensors), the optimizer state (tensors
only, loaded with ``weights_only=True``), the RNG states of python, numpy and torch and of the
backend's own generators (``Backend.rng_state``), the loop's
progress (epoch, batch position, running sums, curve so far) and a sidecar that binds the run's
input digests and every file's sha256. It is written to a temporary folder, fsynced and renamed
into place, so a crash leaves either the old set of checkpoints or the new one, never half.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from voxledger.schemas.errors import TrainingError
from voxledger.schemas.training import TrainingInputs
from voxledger.stores.hashing import sha256_file
from voxledger.tasks.tensorio import save_deterministic

SIDECAR = "sidecar.json"
FILES = ("trainable.safetensors", "optimizer.pt", "rng.json", "progress.json")


def capture_rng() -> dict[str, Any]:
    """RNG states of python, numpy (legacy global) and torch (CPU) as JSON-able data."""
    py = random.getstate()
    state = np.random.get_state(legacy=True)
    if not isinstance(state, tuple):
        raise TypeError("numpy's legacy RNG state is a tuple")
    name, keys, pos, has_gauss, cached = state
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of ``capture_rng``."""
    v, internal, gauss = state["python"]
    random.setstate((v, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Checkpoint:
    """A verified working checkpoint loaded from disk."""

    path: Path
    trainable: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    rng: dict[str, Any]
    progress: dict[str, Any]


def write_checkpoint(
    root: Path,
    step: int,
    *,
    trainable: dict[str, torch.Tensor],
    optimizer: dict[str, Any],
    progress: dict[str, Any],
    bound: TrainingInputs,
    keep: set[int],
    keep_last: int,
    backend_rng: dict[str, Any] | None = None,
) -> Path:
    """Atomically write checkpoint ``step`` under ``root``; prune older ones (keep-last-N + ``keep``)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-{step:08d}-{secrets.token_hex(4)}"
    tmp.mkdir()
    save_deterministic(trainable, tmp / "trainable.safetensors")
    torch.save(optimizer, tmp / "optimizer.pt")
    (tmp / "rng.json").write_text(json.dumps({**capture_rng(), "backend": backend_rng or {}}))
    (tmp / "progress.json").write_text(json.dumps(progress, sort_keys=True))
    files = {name: sha256_file(tmp / name) for name in FILES}
    (tmp / SIDECAR).write_text(json.dumps({"bound": bound.model_dump(mode="json"), "files": files}, sort_keys=True))
    for name in (*FILES, SIDECAR):
        _fsync(tmp / name)
    _fsync(tmp)
    if final.exists():
        shutil.rmtree(final)  # a re-run of the same step after resume: identical content by construction
    os.rename(tmp, final)
    _fsync(root)
    _prune(root, keep | {step}, keep_last)
    return final


def _prune(root: Path, keep: set[int], keep_last: int) -> None:
    steps = sorted(int(p.name[5:]) for p in root.glob("step-*"))
    survivors = set(steps[-keep_last:]) | keep
    for s in steps:
        if s not in survivors:
            shutil.rmtree(root / f"step-{s:08d}", ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by a crash mid-write; never visible as a checkpoint


def latest_checkpoint(root: Path, bound: TrainingInputs) -> Checkpoint | None:
    """The newest checkpoint, verified; TrainingError when it is corrupt or bound to other inputs."""
    steps = sorted(root.glob("step-*")) if root.is_dir() else []
    if not steps:
        return None
    path = steps[-1]
    try:
        sidecar = json.loads((path / SIDECAR).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TrainingError(f"checkpoint {path} has no readable sidecar ({exc}); delete {path} to resume from an older one") from exc
    for name, expected in sidecar["files"].items():
        actual = sha256_file(path / name) if (path / name).is_file() else "missing"
        if actual != expected:
            raise TrainingError(
                f"checkpoint {path} is corrupt: {name} hashes to {actual}, its sidecar says {expected}; "
                f"delete {path} to resume from an older checkpoint, or start a new run"
            )
    then = TrainingInputs.model_validate(sidecar["bound"])
    if then != bound:
        changed = [k for k in TrainingInputs.model_fields if getattr(then, k) != getattr(bound, k)]
        detail = "; ".join(f"{k}: checkpoint {getattr(then, k)} vs now {getattr(bound, k)}" for k in changed)
        raise TrainingError(f"refusing to resume from {path}: bound inputs changed ({detail}); start a new run for new inputs")
    return Checkpoint(
        path=path,
        trainable=load_file(str(path / "trainable.safetensors")),
        optimizer=torch.load(path / "optimizer.pt", weights_only=True),
        rng=json.loads((path / "rng.json").read_text()),
        progress=json.loads((path / "progress.json").read_text()),
    )
