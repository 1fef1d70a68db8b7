"""The stage table: every stage, once, as pure data.

One frozen row per stage names everything that must agree about it: its receipt kind, the
pipeline plan field naming its plan file and that plan's model, its flow and the task writing its
receipt, its module under ``tasks/stages/`` (which holds the stage's whole contract: run, inputs,
verdict, re-run arguments, comparison, summary; ``tasks/stages/contract.py``), the work pool it is
deployed to and its CLI noun (dotted ``module:attribute`` paths, resolved only by the layer they
belong to). This module imports nothing beyond pydantic, the standard library and other schemas,
so anything may read it without importing Prefect or a single stage.

The pipeline, ``voxledger deploy``, ``voxledger pipeline stages``, the CLI, ``voxledger reproduce``,
the receipt registry, ``demo report`` and docs/pipeline-stages.md all read this table. Adding a
stage is one row here, its module and its flow (docs/extending.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, Field

from voxledger.schemas.base import Frozen

PIPELINE = "pipeline"
"""What the pipeline itself is called where stages are named: its work pool, its reproduction."""

PIPELINE_RECEIPT = "pipeline_run"
"""The receipt kind of a pipeline run (reproduced stage by stage)."""


class StageRow(Frozen):
    """One stage. Dotted paths are ``module:attribute``; a stage that shares its receipt kind with
    another shares its module too, and that module's ``stage_of(receipt)`` tells them apart."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="the stage name: pipeline records, stage_pools, deployments")
    receipt: str = Field(description="the kind of the one receipt the stage writes")
    receipt_model: str | None = Field(
        default=None,
        description="the model of a receipt kind the stage brings (added to the receipt registry); None: a kind it lists itself",
    )
    flow: str = Field(description="the stage's flow (what `voxledger deploy` registers and a worker runs)")
    task: str = Field(description="the Prefect task that writes the stage's receipt")
    module: str = Field(description="the stage's module under tasks/stages/: its whole contract (tasks/stages/contract.py)")
    cli: str = Field(description="the command that runs the stage on its own, words separated by spaces")
    pipeline: bool = Field(default=True, description="whether the pipeline runs it (False: a stage run only on its own)")
    inputs: str = Field(
        default="inputs", pattern=r"^[a-z_][a-z0-9_]*$", description="the module's function giving the stage's pipeline inputs"
    )
    plan_field: str | None = Field(default=None, description="the pipeline plan field naming the stage's plan file")
    plan_model: str | None = Field(default=None, description="the model the stage's plan validates into")
    switch: str | None = Field(
        default=None, description="a pipeline plan field that must be set for the stage to run (`package: false` turns it off)"
    )
    pool: str | None = Field(
        default=None, description="the work pool the stage is deployed to unless the plan's stage_pools names one; None: the plan's"
    )
    not_rerun: str | None = Field(default=None, description="why `voxledger reproduce` does not re-run the stage's receipts; None: it does")


STAGE_ROWS: tuple[StageRow, ...] = (
    StageRow(
        name="audit",
        receipt="audit",
        flow="voxledger.flows.audit:audit",
        task="voxledger.flows.audit:audit_corpus",
        module="voxledger.tasks.stages.audit",
        cli="audit",
        plan_field="audit_policy",
        plan_model="voxledger.schemas.audit:AuditPolicy",
    ),
    StageRow(
        name="import_base",
        receipt="base_import",
        flow="voxledger.flows.base:base",
        task="voxledger.flows.base:import_base",
        module="voxledger.tasks.stages.base_import",
        cli="base import",
        switch="shipped_base",
    ),
    StageRow(
        name="train_base",
        receipt="training_run",
        flow="voxledger.flows.train:train",
        task="voxledger.flows.train:train_base",
        module="voxledger.tasks.stages.train",
        cli="train",
        inputs="base_inputs",
        plan_field="base_training",
        plan_model="voxledger.schemas.training:TrainingPlan",
    ),
    StageRow(
        name="train_adapter",
        receipt="training_run",
        flow="voxledger.flows.train:train",
        task="voxledger.flows.train:train_adapter",
        module="voxledger.tasks.stages.train",
        cli="train",
        inputs="adapter_inputs",
        plan_field="adapter_training",
        plan_model="voxledger.schemas.training:TrainingPlan",
    ),
    StageRow(
        name="promote",
        receipt="promotion",
        flow="voxledger.flows.promote:promote",
        task="voxledger.flows.promote:promote_adapter",
        module="voxledger.tasks.stages.promote",
        cli="promote",
        plan_field="promotion_policy",
        plan_model="voxledger.schemas.promotion:PromotionPolicy",
    ),
    StageRow(
        name="evaluate",
        receipt="evaluation",
        flow="voxledger.flows.evaluate:evaluate",
        task="voxledger.flows.evaluate:evaluate_plan",
        module="voxledger.tasks.stages.evaluate",
        cli="eval run",
        plan_field="evaluation",
        plan_model="voxledger.schemas.evaluation:EvaluationPlan",
    ),
    StageRow(
        name="package",
        receipt="package",
        flow="voxledger.flows.package:package",
        task="voxledger.flows.package:package_adapter",
        module="voxledger.tasks.stages.package",
        cli="package build",
        switch="package",
    ),
    StageRow(
        name="export_packets",
        receipt="packet_set",
        flow="voxledger.flows.packets:packets",
        task="voxledger.flows.packets:export_packets",
        module="voxledger.tasks.stages.packets",
        cli="packets export",
        plan_field="listening_protocol",
        plan_model="voxledger.schemas.listening:ListeningProtocol",
        not_rerun="packet sets are blinded with a fresh secret key and set id by design (tasks/stages/packets.py), "
        "so a re-run can never be identical and has no band to be judged by",
    ),
    StageRow(
        name="equivalence",
        receipt="equivalence",
        flow="voxledger.flows.equivalence:equivalence",
        task="voxledger.flows.equivalence:compare_runtimes",
        module="voxledger.tasks.stages.equivalence",
        cli="equivalence compare",
        pipeline=False,
        plan_model="voxledger.schemas.equivalence:EquivalencePlan",
    ),
    StageRow(
        name="sweep",
        receipt="sweep",
        receipt_model="voxledger.schemas.sweep:SweepReceipt",
        flow="voxledger.flows.sweep:sweep",
        task="voxledger.flows.sweep:sweep_step",
        module="voxledger.tasks.stages.sweep",
        cli="sweep run",
        pipeline=False,
        plan_model="voxledger.schemas.sweep:SweepPlan",
        not_rerun="a sweep is its members and one decision: each member is an ordinary training run that "
        "`voxledger reproduce` re-runs on its own receipt; the sweep receipt only names them",
    ),
)
"""Pipeline stages in run order, then the stages run only on their own."""


def pipeline_rows(rows: tuple[StageRow, ...] = STAGE_ROWS) -> tuple[StageRow, ...]:
    """The rows the pipeline runs, in run order."""
    return tuple(r for r in rows if r.pipeline)


def stage_row(name: str) -> StageRow | None:
    """The row of stage ``name`` (None: no such stage)."""
    return next((r for r in STAGE_ROWS if r.name == name), None)


def rows_writing(kind: str) -> tuple[StageRow, ...]:
    """The rows whose stage writes receipts of ``kind``."""
    return tuple(r for r in STAGE_ROWS if r.receipt == kind)


def reproducible_kinds() -> tuple[str, ...]:
    """Receipt kinds ``voxledger reproduce`` re-runs: each stage's not marked ``not_rerun``, then the pipeline run's."""
    return (*dict.fromkeys(r.receipt for r in STAGE_ROWS if r.not_rerun is None), PIPELINE_RECEIPT)


def resolve(path: str) -> Any:
    """The attribute a dotted ``module:attribute`` path names (imported on first use)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def plan_models() -> dict[str, type[BaseModel]]:
    """Every stage plan model by the plan kind its registration records (its ``kind``, else its class name)."""
    models = [resolve(r.plan_model) for r in STAGE_ROWS if r.plan_model is not None]
    return {str(getattr(m.model_fields.get("kind"), "default", None) or m.__name__): m for m in models}
