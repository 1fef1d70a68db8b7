"""A base model that ships inside the package, and the receipt of bringing it into a home.

A backend may ship a trained base (``Backend.shipped_base``): its checkpoint tree plus the exact
receipts that produced it (training run, best checkpoint, the audit of its corpus, the training
plan), so that a user's first adapter needs no base training run. ``ShippedBase`` is the
bundle's manifest; every file of the bundle is named in it by sha256, and a receipt file's
sha256 is that receipt's id in the home that trained it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.training import BackendName


class ShippedBase(Frozen):
    """``base.json`` of a shipped base bundle."""

    format: Literal["voxledger.shipped-base/v1"] = "voxledger.shipped-base/v1"
    backend: BackendName
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    tree_sha256: Sha256 = Field(description="digest of the checkpoint tree under tree/ (the base every adapter binds to)")
    files: dict[str, Sha256] = Field(description="receipt and plan files of the bundle (name -> sha256 of its bytes)")
    training_run: Sha256 = Field(description="receipt id of the training run whose best checkpoint is the tree")
    training_plan_sha256: Sha256
    audit_receipt: Sha256
    code_commit: str | None = Field(description="git commit of the code that trained it (also in the training receipt)")
    platform: str
    precision_effective: str
    speakers: tuple[str, ...] = Field(description="the voices the base speaks (an adapter adds one more)")
    language: str = Field(description="the manifest language code the base was trained on; adapters must use it")
    summary: str = Field(description="epochs, steps, CV loss: one line for listings")
    reproduce: tuple[str, ...] = Field(description="the commands that trained it, in order, as run from a checkout of code_commit")


class BaseImportParameters(Frozen):
    """Which shipped base was brought in, and the evidence it came with."""

    backend: BackendName
    name: str
    bundle_sha256: Sha256 = Field(description="sha256 of the bundle's base.json (canonical JSON)")
    training_run: Sha256
    training_plan_sha256: Sha256
    code_commit: str | None
    platform: str
    precision_effective: str
    verified: tuple[str, ...] = Field(description="what was checked before the tree was stored, one line each")


class BaseImportReceipt(ReceiptBase):
    """A shipped base entered the store: subject ``base`` is its tree; inputs are the shipped receipts as blobs."""

    kind: Literal["base_import"] = "base_import"
    parameters: BaseImportParameters
