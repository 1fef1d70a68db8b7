"""The ``adapter_export`` receipt: a package written out as a folder another ecosystem reads.

An export is a derived view: every byte of it is a function of the package's own members (its
adapter files and the receipts it binds), so the same package gives the same folder digest. The
receipt names the package it read, the receipts inside it the model card quotes, and the folder
it wrote (a stored tree).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256

ExportFormat = Literal["peft"]
"""``peft``: a folder ``peft.PeftModel.from_pretrained`` loads (``adapter_config.json``,
``adapter_model.safetensors``) with a Hugging Face model card (``README.md``)."""


class ExportedFile(Frozen):
    """One file of the exported folder."""

    path: str = Field(min_length=1, max_length=255)
    sha256: Sha256
    size_bytes: int = Field(ge=0)


class AdapterExportParameters(Frozen):
    """What was exported, and as what."""

    package_sha256: Sha256
    format: ExportFormat


class AdapterExportResult(Frozen):
    """The folder written: its tree digest, its files, and what its model card states."""

    tree_sha256: Sha256
    files: tuple[ExportedFile, ...] = Field(min_length=1)
    base_model_name_or_path: str
    read_receipts: tuple[Sha256, ...] = Field(description="the package's receipt members the model card is built from")
    gate_verdict: Literal["promoted", "unpromoted"]
    not_measured: tuple[str, ...] = ()


class AdapterExportReceipt(ReceiptBase):
    """A package was exported as a folder another ecosystem loads; subjects are that folder (a tree)."""

    kind: Literal["adapter_export"] = "adapter_export"
    parameters: AdapterExportParameters
    result: AdapterExportResult
