"""Receipt kinds of the foundation: putting bytes into the store and registering a frozen plan."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256


class IngestParameters(Frozen):
    """What was put: a file, a directory tree or raw bytes, named by its base name only."""

    source: Literal["file", "tree", "bytes"]
    name: str = Field(max_length=255)
    file_count: int = Field(ge=0)
    total_bytes: int = Field(ge=0)


class IngestReceipt(ReceiptBase):
    """Bytes entered the store; the subject is the blob (or tree manifest) digest."""

    kind: Literal["ingest"] = "ingest"
    parameters: IngestParameters


class PlanParameters(Frozen):
    """A frozen plan registered before any work refers to it."""

    plan_kind: str
    plan_sha256: Sha256
    source_name: str = Field(max_length=255)


class PlanReceipt(ReceiptBase):
    """A plan was validated and frozen; the subject is its canonical JSON blob (id = plan digest)."""

    kind: Literal["plan"] = "plan"
    parameters: PlanParameters
