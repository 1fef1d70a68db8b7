"""Flow ``evaluate``: run a frozen evaluation plan with artifacts bound by digest."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home
from voxledger.flows.factory import stage_flow
from voxledger.flows.progress import report
from voxledger.schemas.base import InputRef
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.evaluate import evaluate_plan_fn


@task(name="evaluate_plan", **STAGE_TASK)
def evaluate_plan(
    home: HomeRef, corpus: str, plan: PlanRef, bindings: dict[str, str], parents: tuple[InputRef, ...] = ()
) -> StageOutcome[EvaluationReceipt]:
    """Generate every (candidate, prompt, seed) of a registered plan, measure, summarise, record."""
    h, evaluation, name = open_home(home), plan.validated(EvaluationPlan), plan.source_name
    return evaluate_plan_fn(
        h, evaluation, plan_name=name, corpus=Path(corpus), bindings=bindings, flow=flow_name(), progress=report, parents=parents
    )


def evaluate_step(home: HomeRef, corpus: str, plan: PlanRef, bindings: dict[str, str]) -> StageOutcome[EvaluationReceipt]:
    """The evaluation of a plan with its artifacts bound by digest (the task; the gate calls it with its parents)."""
    return evaluate_plan(home, corpus, plan, bindings)


evaluate = stage_flow(
    "evaluate",
    evaluate_step,
    module=__name__,
    plan_model=EvaluationPlan,
    doc="Evaluate candidates on a frozen plan (a plan reference or file).",
)
