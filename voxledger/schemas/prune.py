"""Checkpoint pruning: a reviewable plan, executed exactly, recorded as a receipt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256


class PruneEntry(Frozen):
    """One checkpoint and the blobs that would go with it."""

    checkpoint_receipt: Sha256
    tree_sha256: Sha256
    epoch: int
    cv_loss: float
    reason: str
    blobs: tuple[Sha256, ...] = ()


class PrunePlan(Frozen):
    """What to keep and what to remove; executing it removes exactly ``remove[*].blobs``."""

    format: Literal["voxledger.prune-plan/1"] = "voxledger.prune-plan/1"
    keep_best: int = Field(ge=1)
    keep: tuple[PruneEntry, ...]
    remove: tuple[PruneEntry, ...]


class PruneParameters(Frozen):
    """The executed plan and what it freed."""

    plan_sha256: Sha256
    removed_blobs: tuple[Sha256, ...]
    freed_bytes: int = Field(ge=0)


class PruneReceipt(ReceiptBase):
    """Checkpoint blobs were removed under a reviewed plan (the receipts themselves stay)."""

    kind: Literal["prune"] = "prune"
    parameters: PruneParameters
