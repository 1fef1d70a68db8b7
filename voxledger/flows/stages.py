"""The pipeline's stages, built from the stage table (``schemas/stages.py``) with its paths resolved.

The pipeline (run here or dispatched to a work pool), ``voxledger deploy``, the CLI's
``pipeline stages`` listing and docs/pipeline-stages.md are all derived from ``STAGES``: one
``StageSpec`` per pipeline row, holding its flow (what ``deploy`` registers and a worker runs), its
task (what writes its one receipt), the pipeline plan field naming its plan file and that plan's
model, and how its inputs follow from the stages before it and its verdict (both from the stage's
module, ``tasks/stages/<noun>.py``). Adding a stage is one row in the table.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.pipeline import PipelinePlan
from voxledger.schemas.registry import RECEIPT_TYPES
from voxledger.schemas.stages import STAGE_ROWS, StageRow, pipeline_rows, resolve
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.contract import StageContext, never_stops

Inputs = Callable[[StageContext], dict[str, Any] | None]
RECEIPT_MODELS: dict[str, type[ReceiptBase]] = {t.model_fields["kind"].default: t for t in RECEIPT_TYPES}


def _stopping(verdict: Callable[[StageOutcome[Any]], None]) -> Callable[[StageOutcome[Any]], None] | None:
    """A module's verdict, None for ``never_stops`` (a stage whose receipt never stops the pipeline)."""
    return None if verdict is never_stops else verdict


def _switched_on(field_name: str) -> Callable[[PipelinePlan], bool]:
    """Whether a pipeline plan sets ``field_name`` (``package: true``, ``shipped_base: cosyvoice3``)."""

    def switched_on(plan: PipelinePlan) -> bool:
        return bool(getattr(plan, field_name))

    return switched_on


@dataclass(frozen=True)
class StageSpec:
    """One stage: its flow and task, its plan, its inputs, its verdict.

    ``inputs`` returns the task's arguments besides ``home`` and ``plan``, or None when the stage
    does not run for this pipeline plan. ``verdict`` raises when the recorded receipt says the
    pipeline must stop (a failed audit, no promotion); such a stage's flow run fails after
    recording, so a dispatched run that failed is judged by its receipt, not its state.
    """

    name: str
    flow: Any
    task: Any
    receipt: type[ReceiptBase]
    inputs: Inputs
    plan_field: str | None = None
    plan_model: type[BaseModel] | None = None
    verdict: Callable[[StageOutcome[Any]], None] | None = None
    when: Callable[[PipelinePlan], bool] | None = None
    """A switch in the pipeline plan besides naming a plan file (``package: false``)."""
    pool: str | None = None
    """The work pool the stage is deployed to unless the plan's ``stage_pools`` names one (None: the plan's)."""

    @classmethod
    def of(cls, row: StageRow) -> StageSpec:
        """The row's stage, its dotted paths resolved (its flow and its plan model imported)."""
        if not row.pipeline:
            raise ValueError(f"stage {row.name} is run only on its own: it is not a pipeline stage")
        return cls(
            name=row.name,
            flow=resolve(row.flow),
            task=resolve(row.task),
            receipt=RECEIPT_MODELS[row.receipt],
            inputs=resolve(f"{row.module}:{row.inputs}"),
            plan_field=row.plan_field,
            plan_model=resolve(row.plan_model) if row.plan_model is not None else None,
            verdict=_stopping(resolve(f"{row.module}:verdict")),
            when=_switched_on(row.switch) if row.switch is not None else None,
            pool=row.pool,
        )

    def entrypoint(self) -> str:
        """The flow's ``path:name`` relative to the source directory (what a worker loads): the file of
        the module defining it; ``module:name`` for a flow defined outside it (listed, not deployable from here)."""
        fn = self.flow.fn
        root = Path(__file__).resolve().parents[2]
        source = getattr(sys.modules.get(fn.__module__), "__file__", None)
        if source is not None:
            path = Path(source).resolve()
            if path.suffix == ".py" and path.is_relative_to(root):
                return f"{path.relative_to(root).as_posix()}:{fn.__name__}"
        return f"{fn.__module__}:{fn.__name__}"

    def plan_file(self, plan: PipelinePlan) -> str | None:
        """The plan file name the pipeline plan gives this stage (None: the stage takes no plan)."""
        return getattr(plan, self.plan_field) if self.plan_field else None

    def enabled(self, plan: PipelinePlan) -> bool:
        """Whether a pipeline plan can run this stage (its plan file is named, when it needs one)."""
        named = self.plan_field is None or bool(self.plan_file(plan))
        return named and (self.when is None or self.when(plan))

    def work_pool(self, plan: PipelinePlan) -> str:
        """The work pool this stage runs on under ``plan``: its ``stage_pools`` entry, else the row's pool, else the plan's."""
        return plan.stage_pools.get(self.name) or self.pool or plan.pool_of(self.name)

    def deployment(self, plan: PipelinePlan) -> str:
        """``<flow>/<plan>-<stage>``: the deployment ``voxledger deploy`` registers for this stage."""
        return f"{self.flow.name}/{plan.name}-{self.name}"


STAGES: tuple[StageSpec, ...] = tuple(StageSpec.of(row) for row in pipeline_rows(STAGE_ROWS))
"""In run order. Tests extend this tuple (monkeypatched) to show a stage is one entry."""


def stage_table() -> tuple[StageSpec, ...]:
    """The table in force (looked up at call time, so an extended table is seen everywhere)."""
    return STAGES


def stage_names() -> tuple[str, ...]:
    """Every stage name, in run order."""
    return tuple(s.name for s in stage_table())


def pool_of(plan: PipelinePlan, stage: str) -> str:
    """The work pool ``stage`` (a stage of the table in force, or the pipeline itself) runs on under ``plan``."""
    spec = next((s for s in stage_table() if s.name == stage), None)
    return spec.work_pool(plan) if spec is not None else plan.pool_of(stage)


def _stops(verdict: Callable[[StageOutcome[Any]], None] | None) -> str | None:
    """When a stage's receipt stops the pipeline (its verdict's summary line); None: never."""
    if verdict is None or verdict is never_stops:
        return None
    return (verdict.__doc__ or verdict.__qualname__).strip().splitlines()[0]


def describe(plan: PipelinePlan | None = None) -> list[dict[str, Any]]:
    """The table as rows (for the CLI and the generated docs); with a plan, whether and where each stage runs."""
    rows = []
    for s in stage_table():
        row: dict[str, Any] = {
            "stage": s.name,
            "flow": s.flow.name,
            "entrypoint": s.entrypoint(),
            "task": getattr(s.task, "name", s.task.__name__),
            "receipt": s.receipt.model_fields["kind"].default,
            "plan_field": s.plan_field,
            "plan_kind": s.plan_model.model_fields["kind"].default if s.plan_model is not None else None,
            "verdict": _stops(s.verdict),
        }
        if plan is not None:
            row |= {"plan_file": s.plan_file(plan), "enabled": s.enabled(plan), "pool": s.work_pool(plan)}
        rows.append(row)
    return rows
