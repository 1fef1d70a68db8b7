"""Flow ``evaluate``: run a frozen evaluation plan with artifacts bound by digest."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.stores.home import Home
from voxledger.tasks.evaluation.run import evaluate_plan_fn
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stage import StageOutcome


@task(name="evaluate_plan", **STAGE_TASK)
def evaluate_plan(home: str, corpus: str, plan_file: str, bindings: dict[str, str]) -> StageOutcome[EvaluationReceipt]:
    """Register the plan, generate every (candidate, prompt, seed), measure, summarise, record."""
    plan = load_plan(Path(plan_file), EvaluationPlan)
    return evaluate_plan_fn(Home(home), plan, plan_name=Path(plan_file).name, corpus=Path(corpus), bindings=bindings,
                            flow=flow_name(), progress=report)  # fmt: skip


@flow(name="evaluate")
def evaluate(home: str, corpus: str, plan_file: str, bindings: dict[str, str]) -> StageOutcome[EvaluationReceipt]:
    """Evaluate candidates on a frozen plan."""
    with shared_store(home):
        return announce(evaluate_plan(home, corpus, plan_file, bindings))
