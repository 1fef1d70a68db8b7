"""The closed registry of receipt kinds. Loading dispatches on ``kind`` (a discriminated union).

Adding a kind: define a ``ReceiptBase`` subclass with a literal ``kind``, add it to
``RECEIPT_TYPES`` (the discriminated union is built from it; a stage that brings its own kind names
its model in its stage-table row instead, ``receipt_model``), write its projector in
``stores/projections.py`` when it has typed tables (with their migration in
``stores/migrations.py``), then run ``voxledger receipt schemas --write``. docs/extending.md.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter

from voxledger.schemas.adapter_export import AdapterExportReceipt
from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.core import IngestReceipt, PlanReceipt
from voxledger.schemas.corpus import MaterialiseReceipt, PrepareReceipt
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.listening_receipts import (
    AggregateReceipt,
    PacketSetReceipt,
    SubmissionReceipt,
)
from voxledger.schemas.mlflow_export import MlflowExportReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.schemas.pipeline import PipelineRunReceipt
from voxledger.schemas.promotion import PromotionReceipt
from voxledger.schemas.prune import PruneReceipt
from voxledger.schemas.reproduction import ReproductionReceipt
from voxledger.schemas.shipped import BaseImportReceipt
from voxledger.schemas.training import CheckpointReceipt, TrainingRunReceipt

_LISTED: tuple[type[ReceiptBase], ...] = (
    IngestReceipt,
    PlanReceipt,
    AuditReceipt,
    EquivalenceReceipt,
    CheckpointReceipt,
    TrainingRunReceipt,
    EvaluationReceipt,
    PromotionReceipt,
    PipelineRunReceipt,
    PruneReceipt,
    PacketSetReceipt,
    SubmissionReceipt,
    AggregateReceipt,
    PackageReceipt,
    PrepareReceipt,
    MaterialiseReceipt,
    BaseImportReceipt,
    ReproductionReceipt,
    AdapterExportReceipt,
    MlflowExportReceipt,
)


def _brought_by_stages() -> tuple[type[ReceiptBase], ...]:
    """The receipt models stage rows bring (``receipt_model``), each a ReceiptBase whose kind is the row's."""
    from voxledger.schemas.stages import STAGE_ROWS, resolve

    brought: list[type[ReceiptBase]] = []
    for row in STAGE_ROWS:
        if row.receipt_model is None:
            continue
        model = resolve(row.receipt_model)
        if not (isinstance(model, type) and issubclass(model, ReceiptBase)) or model.model_fields["kind"].default != row.receipt:
            raise TypeError(f"stage {row.name}: receipt_model {row.receipt_model} is not a ReceiptBase of kind {row.receipt!r}")
        brought.append(model)
    return tuple(brought)


RECEIPT_TYPES: tuple[type[ReceiptBase], ...] = (*_LISTED, *_brought_by_stages())
"""Every receipt kind: those listed here, then those the stage table's rows bring."""

# the discriminated union is built from the one list above: a kind is registered in one place
AnyReceipt = Annotated[Union[RECEIPT_TYPES], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007
RECEIPT_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyReceipt)


def kind_of(model: type[ReceiptBase]) -> str:
    """The literal ``kind`` value of a receipt class."""
    default = model.model_fields["kind"].default
    if not isinstance(default, str):
        raise TypeError(f"{model.__name__} has no literal kind default")
    return default


KINDS: dict[str, type[ReceiptBase]] = {kind_of(m): m for m in RECEIPT_TYPES}


def json_schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) generated from the model of ``kind``."""
    schema = KINDS[kind].model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://voxledger.dev/schemas/receipt/{kind}/v1"
    # the model class, so reading one receipt imports only its own schema module (``stores.receipts``)
    schema["x-voxledger-model"] = f"{KINDS[kind].__module__}:{KINDS[kind].__qualname__}"
    return schema


def schema_files() -> dict[str, str]:
    """File name -> JSON text for every kind; this is what ``schemas/json/`` must contain."""
    return {f"{kind}.v1.schema.json": json.dumps(json_schema_for(kind), indent=2, sort_keys=True) + "\n" for kind in sorted(KINDS)}
