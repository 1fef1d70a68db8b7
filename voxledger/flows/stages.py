"""The pipeline's stages, built from the stage table (``schemas/stages.py``) with its paths resolved.

The pipeline (run here or dispatched to a work pool), ``voxledger deploy``, the CLI's
``pipeline stages`` listing and docs/pipeline-stages.md are all derived from ``STAGES``: one
``StageSpec`` per pipeline row, holding its flow (what ``deploy`` registers and a worker runs), its
task (what writes its one receipt), the pipeline plan field naming its plan file and that plan's
model, and how its inputs follow from the stages before it (the ``*_inputs`` functions here, which
the rows name). Adding a stage is one row in the table.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.pipeline import PipelinePlan
from voxledger.schemas.registry import RECEIPT_TYPES
from voxledger.schemas.stages import STAGE_ROWS, StageRow, pipeline_rows, resolve
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome


@dataclass
class StageContext:
    """What a stage's inputs are computed from: the run's fixed arguments and earlier outcomes."""

    home: HomeRef
    corpus: str
    plan: PipelinePlan
    plans: dict[str, PlanRef]
    packets_dir: str | None
    outcomes: dict[str, StageOutcome[Any]] = field(default_factory=dict)

    def rid(self, stage: str) -> str:
        """The receipt id an earlier stage recorded."""
        return self.outcomes[stage].receipt_id

    def best(self, stage: str) -> str | None:
        """The best checkpoint of an earlier training stage, None when that stage did not run."""
        out = self.outcomes.get(stage)
        return out.receipt.subject("best").sha256 if out is not None else None

    def base(self) -> str | None:
        """The base tree adapters bind to: the base training's best checkpoint, else the imported shipped base."""
        trained = self.best("train_base")
        if trained is not None:
            return trained
        out = self.outcomes.get("import_base")
        return out.receipt.subject("base").sha256 if out is not None else None

    def winner(self) -> tuple[str, str]:
        """(promotion receipt id, tree digest of the promoted checkpoint)."""
        promo = self.outcomes["promote"]
        result = promo.receipt.result
        tree = next(c.tree_sha256 for c in result.challengers if c.name == result.promoted)
        return promo.receipt_id, tree


Inputs = Callable[[StageContext], dict[str, Any] | None]
RECEIPT_MODELS: dict[str, type[ReceiptBase]] = {t.model_fields["kind"].default: t for t in RECEIPT_TYPES}


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
        if row.inputs is None:
            raise ValueError(f"stage {row.name} has no pipeline inputs: it is not a pipeline stage")
        return cls(
            name=row.name,
            flow=resolve(row.flow),
            task=resolve(row.task),
            receipt=RECEIPT_MODELS[row.receipt],
            inputs=resolve(row.inputs),
            plan_field=row.plan_field,
            plan_model=resolve(row.plan_model) if row.plan_model is not None else None,
            verdict=resolve(row.verdict) if row.verdict is not None else None,
            when=_switched_on(row.switch) if row.switch is not None else None,
            pool=row.pool,
        )

    def entrypoint(self) -> str:
        """The flow's ``path:function`` relative to the source directory (what a worker loads);
        ``module:function`` for a flow defined outside it (listed, but not deployable from here)."""
        fn = self.flow.fn
        root = Path(__file__).resolve().parents[2]
        try:
            source = Path(inspect.getfile(fn)).resolve()
            if source.suffix == ".py" and source.is_file():
                return f"{source.relative_to(root).as_posix()}:{fn.__name__}"
        except (TypeError, ValueError):  # no file (built at run time), or a file elsewhere
            pass
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


def corpus_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus."""
    return {"corpus": ctx.corpus}


def import_base_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the backend whose shipped base the plan adapts."""
    return {"backend": ctx.plan.shipped_base}


def train_base_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and the audit's receipt; no base (it trains one from scratch)."""
    return {"corpus": ctx.corpus, "audit_rid": ctx.rid("audit"), "base_sha": None}


def train_adapter_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus, the audit's receipt and the base (trained here, or the imported shipped base)."""
    return {"corpus": ctx.corpus, "audit_rid": ctx.rid("audit"), "base_sha": ctx.base()}


def promote_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and the adapter training run's receipt."""
    return {"corpus": ctx.corpus, "run_rid": ctx.rid("train_adapter")}


def _bindings(ctx: StageContext) -> dict[str, str]:
    base = ctx.base()
    return {"adapter": ctx.winner()[1], **({"base": base} if base else {})}


def evaluate_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and bindings: `adapter` is the promoted checkpoint, `base` the trained or imported base."""
    return {"corpus": ctx.corpus, "bindings": _bindings(ctx)}


def package_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the adapter training run, the promoted checkpoint, the promotion and the evaluation receipts."""
    promotion_rid, tree = ctx.winner()
    return {"run_rid": ctx.rid("train_adapter"), "tree_sha": tree, "promotion_rid": promotion_rid, "eval_rids": (ctx.rid("evaluate"),)}


def export_packets_inputs(ctx: StageContext) -> dict[str, Any] | None:
    """Inputs: the evaluation receipt and the packets folder; runs only when the pipeline is given `--packets`."""
    if not ctx.packets_dir:
        return None
    return {"out_dir": ctx.packets_dir, "evaluation_rid": ctx.rid("evaluate")}


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
            "verdict": s.verdict.__name__ if s.verdict is not None else None,
        }
        if plan is not None:
            row |= {"plan_file": s.plan_file(plan), "enabled": s.enabled(plan), "pool": s.work_pool(plan)}
        rows.append(row)
    return rows
