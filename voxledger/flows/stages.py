"""The stage table: every pipeline stage, once.

The pipeline (run here or dispatched to a work pool), ``voxledger deploy``, the CLI's
``pipeline stages`` listing and docs/pipeline-stages.md are all derived from ``STAGES``. A stage
names its flow (what ``deploy`` registers and a worker runs), its task (what writes its one
receipt), the pipeline plan field naming its plan file and that plan's model, and how its inputs
follow from the stages before it. Adding a stage or a backend's stage is one entry here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from voxledger.flows.audit import audit, audit_corpus, require_pass
from voxledger.flows.base import base, import_base
from voxledger.flows.evaluate import evaluate, evaluate_plan
from voxledger.flows.package import package, package_adapter
from voxledger.flows.packets import export_packets, packets
from voxledger.flows.promote import promote, promote_adapter, require_promoted
from voxledger.flows.train import train, train_adapter, train_base
from voxledger.schemas.audit import AuditPolicy, AuditReceipt
from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.schemas.listening import ListeningProtocol
from voxledger.schemas.listening_receipts import PacketSetReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.schemas.pipeline import PipelinePlan
from voxledger.schemas.promotion import PromotionPolicy, PromotionReceipt
from voxledger.schemas.shipped import BaseImportReceipt
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
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

    def deployment(self, plan: PipelinePlan) -> str:
        """``<flow>/<plan>-<stage>``: the deployment ``voxledger deploy`` registers for this stage."""
        return f"{self.flow.name}/{plan.name}-{self.name}"


def _corpus(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus."""
    return {"corpus": ctx.corpus}


def _import_base(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the backend whose shipped base the plan adapts."""
    return {"backend": ctx.plan.shipped_base}


def _train_base(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and the audit's receipt; no base (it trains one from scratch)."""
    return {"corpus": ctx.corpus, "audit_rid": ctx.rid("audit"), "base_sha": None}


def _train_adapter(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus, the audit's receipt and the base (trained here, or the imported shipped base)."""
    return {"corpus": ctx.corpus, "audit_rid": ctx.rid("audit"), "base_sha": ctx.base()}


def _promote(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and the adapter training run's receipt."""
    return {"corpus": ctx.corpus, "run_rid": ctx.rid("train_adapter")}


def _bindings(ctx: StageContext) -> dict[str, str]:
    base = ctx.base()
    return {"adapter": ctx.winner()[1], **({"base": base} if base else {})}


def _evaluate(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and bindings: `adapter` is the promoted checkpoint, `base` the trained or imported base."""
    return {"corpus": ctx.corpus, "bindings": _bindings(ctx)}


def _package(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the adapter training run, the promoted checkpoint, the promotion and the evaluation receipts."""
    promotion_rid, tree = ctx.winner()
    return {"run_rid": ctx.rid("train_adapter"), "tree_sha": tree, "promotion_rid": promotion_rid, "eval_rids": (ctx.rid("evaluate"),)}


def _packets(ctx: StageContext) -> dict[str, Any] | None:
    """Inputs: the evaluation receipt and the packets folder; runs only when the pipeline is given `--packets`."""
    if not ctx.packets_dir:
        return None
    return {"out_dir": ctx.packets_dir, "evaluation_rid": ctx.rid("evaluate")}


STAGES: tuple[StageSpec, ...] = (
    StageSpec("audit", audit, audit_corpus, AuditReceipt, _corpus, "audit_policy", AuditPolicy, require_pass),
    StageSpec("import_base", base, import_base, BaseImportReceipt, _import_base, when=lambda plan: plan.shipped_base is not None),
    StageSpec("train_base", train, train_base, TrainingRunReceipt, _train_base, "base_training", TrainingPlan),
    StageSpec("train_adapter", train, train_adapter, TrainingRunReceipt, _train_adapter, "adapter_training", TrainingPlan),
    StageSpec("promote", promote, promote_adapter, PromotionReceipt, _promote, "promotion_policy", PromotionPolicy, require_promoted),
    StageSpec("evaluate", evaluate, evaluate_plan, EvaluationReceipt, _evaluate, "evaluation", EvaluationPlan),
    StageSpec("package", package, package_adapter, PackageReceipt, _package, when=lambda plan: plan.package),
    StageSpec("export_packets", packets, export_packets, PacketSetReceipt, _packets, "listening_protocol", ListeningProtocol),
)
"""In run order. Tests extend this tuple (monkeypatched) to show a stage is one entry."""


def stage_table() -> tuple[StageSpec, ...]:
    """The table in force (looked up at call time, so an extended table is seen everywhere)."""
    return STAGES


def stage_names() -> tuple[str, ...]:
    """Every stage name, in run order."""
    return tuple(s.name for s in stage_table())


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
            row |= {"plan_file": s.plan_file(plan), "enabled": s.enabled(plan), "pool": plan.pool_of(s.name)}
        rows.append(row)
    return rows
