"""Flow ``promote``: gate a run's checkpoints against the champion; failing gates fail the run.

A promotion is four Prefect tasks, each writing at most one receipt: the policy's registration,
``prepare_promotion`` (the round: challengers, incumbent, gate plan; or the stored answer), the
gate plan's registration and the gate evaluation (``evaluate_plan``, the same task the evaluate
stage runs), then ``decide_promotion`` (rules judged, aliases moved, the promotion receipt).
"""

from __future__ import annotations

from prefect import task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, register_plan_task
from voxledger.flows.evaluate import evaluate_plan
from voxledger.flows.factory import stage_flow
from voxledger.flows.progress import report
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.schemas.promotion import PromotionPolicy, PromotionReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages import promote as stage
from voxledger.tasks.stages.promote import PromotionRound, decide_promotion, prepare_promotion


@task(name="prepare_promotion", **STAGE_TASK)
def prepare_round(home: HomeRef, run_rid: str, plan: PlanRef) -> PromotionRound | StageOutcome[PromotionReceipt]:
    """The round to judge (best-k + last against the incumbent), or the stored promotion of this round."""
    h, policy = open_home(home), plan.validated(PromotionPolicy)
    return prepare_promotion(h, run_rid, policy, policy_name=plan.source_name, flow=flow_name(), progress=report)


@task(name="decide_promotion", **STAGE_TASK)
def decide_round(home: HomeRef, rnd: PromotionRound, gate: StageOutcome[EvaluationReceipt]) -> StageOutcome[PromotionReceipt]:
    """Judge the rules on the gate evaluation; aliases move inside the promotion receipt."""
    return decide_promotion(open_home(home), rnd, gate, flow=flow_name())


def promote_adapter(home: HomeRef, corpus: str, run_rid: str, plan: PlanRef) -> StageOutcome[PromotionReceipt]:
    """The promotion stage: its steps as separate tasks of the running flow (the policy is registered
    by the caller, like every stage plan)."""
    prepared = prepare_round(home, run_rid, plan)
    if isinstance(prepared, StageOutcome):
        return prepared
    gate = PlanRef.of(prepared.gate, prepared.gate_name)
    register_plan_task(home, gate, EvaluationPlan)
    evaluated = evaluate_plan(home, corpus, gate, prepared.bindings, prepared.gate_parents())
    return decide_round(home, prepared, evaluated)


promote = stage_flow(
    "promote",
    promote_adapter,
    module=__name__,
    plan_model=PromotionPolicy,
    verdict=stage.verdict,
    doc="Promote through gates (a policy reference or file); the receipt is written before a failing gate fails the run.",
)
