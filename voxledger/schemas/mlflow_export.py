"""The ``mlflow_export`` receipt: a home's catalog projected into an MLflow tracking store.

The projection is a derived view: one MLflow run per stage receipt (params, metrics, per-epoch
curves, tagged with the receipt and artifact digests), one registered model per model line with a
version per package, and each line's aliases set as its alias history leaves them. An export
writes only what the store does not hold yet (runs are found by their receipt tag, versions by
their package tag), so the receipt says what it read, what it wrote and what it found already
there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256


class MlflowExportParameters(Frozen):
    """Where the projection went."""

    tracking_uri: str = Field(min_length=1, description="the tracking (and registry) store, credentials removed")
    experiment: str = Field(min_length=1, max_length=500, description="the MLflow experiment the runs are in")


class ExportedRun(Frozen):
    """One stage receipt's MLflow run."""

    receipt_sha256: Sha256
    kind: str
    run_id: str
    created: bool = Field(description="False: the store already held this receipt's run")
    params: int = Field(ge=0, description="params logged (0 when the run was already there)")
    metrics: int = Field(ge=0, description="metric values logged, every step of a curve counted")
    params_too_long: tuple[str, ...] = Field(
        default=(), description="params longer than MLflow's 6000-character limit, left out (the run's receipt.json holds them)"
    )


class ExportedVersion(Frozen):
    """One package as a version of its model line's registered model."""

    package_sha256: Sha256
    package_receipt: Sha256
    model: str
    line: str
    version: str
    created: bool


class ExportedAlias(Frozen):
    """One alias of a model line as its history leaves it, and what the registry says now."""

    model: str
    line: str
    alias: str
    target_sha256: Sha256 = Field(description="the checkpoint tree the alias points at in the home")
    version: str | None = Field(description="the registered version it now names; None: no package of that checkpoint")
    changed: bool = Field(description="True: the registry's alias was set (or removed) by this export")


class MlflowExportResult(Frozen):
    """What the store holds for this home after the export, and what this export added."""

    experiment_id: str
    runs: tuple[ExportedRun, ...]
    versions: tuple[ExportedVersion, ...]
    aliases: tuple[ExportedAlias, ...]
    runs_created: int = Field(ge=0)
    versions_created: int = Field(ge=0)
    aliases_changed: int = Field(ge=0)
    abandoned_runs_deleted: int = Field(ge=0, description="runs an interrupted export left without their receipt tag, removed")


class MlflowExportReceipt(ReceiptBase):
    """A home's catalog was projected into an MLflow store; inputs are the receipts it read."""

    kind: Literal["mlflow_export"] = "mlflow_export"
    parameters: MlflowExportParameters
    result: MlflowExportResult
