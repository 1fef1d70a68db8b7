"""Flow ``evaluate``: run a frozen evaluation plan with artifacts bound by digest."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, open_home, register_plan_task, shared_store
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


@flow(name="evaluate")
def evaluate(home: HomeRef | str, corpus: str, plan: PlanRef | str, bindings: dict[str, str]) -> StageOutcome[EvaluationReceipt]:
    """Evaluate candidates on a frozen plan (a plan reference or file)."""
    ref = HomeRef.of(home)
    plan_ref = PlanRef.coerce(plan, EvaluationPlan)
    with shared_store(ref):
        register_plan_task(ref, plan_ref, EvaluationPlan)
        return announce(evaluate_plan(ref, corpus, plan_ref, bindings))
