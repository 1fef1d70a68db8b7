"""Flow ``sweep``: every member of a sweep trained (at most ``workers`` at once), then one gate over all of them.

Members are tasks of a subflow whose thread pool has the sweep plan's ``workers`` slots (or, where
the plan names a ``work_pool``, flow runs on that pool's workers: ``flows/sweep_pool.py``); each task
trains its member in a process of its own (``tasks/stages/sweep/members.py``: torch's generators and
thread count are process-wide) or serves it from cache, so a re-run trains only the members that
did not finish. Then the one gate: ``prepare_sweep_gate``, the gate plan's registration and the
gate evaluation (``evaluate_plan``, the task the evaluate stage runs), ``decide_sweep_gate``, and
the sweep receipt (``record_sweep``).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, register_plan_task
from voxledger.flows.evaluate import evaluate_plan
from voxledger.flows.factory import stage_flow
from voxledger.flows.sweep_pool import train_members_on_pool
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.schemas.promotion import PromotionPolicy, PromotionReceipt
from voxledger.schemas.sweep import SweepPlan, SweepReceipt
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages import sweep as stage
from voxledger.tasks.stages.promote import PromotionRound
from voxledger.tasks.stages.sweep.gate import decide_sweep_gate, prepare_sweep_gate
from voxledger.tasks.stages.sweep.members import train_member


@task(name="train_member", **STAGE_TASK)
def train_sweep_member(home: HomeRef, corpus: str, audit_rid: str, plan: PlanRef, base_sha: str | None) -> StageOutcome[TrainingRunReceipt]:
    """One member's training run: served from cache, or trained (resumed) in a process of its own."""
    training = plan.validated(TrainingPlan)
    return train_member(home, corpus, audit_rid, training, plan_name=plan.source_name, base_sha=base_sha, flow=flow_name())


@flow(name="train_members")
def train_members(
    home: HomeRef, corpus: str, audit_rid: str, plans: list[PlanRef], base_sha: str | None
) -> list[StageOutcome[TrainingRunReceipt]]:
    """Every member's run, as many at once as the task runner has slots (the sweep's ``workers``)."""
    futures = [train_sweep_member.submit(home, corpus, audit_rid, p, base_sha) for p in plans]
    return [f.result() for f in futures]


@task(name="prepare_sweep_gate", **STAGE_TASK)
def prepare_gate(home: HomeRef, members: list[tuple[str, str]], policy: PlanRef) -> PromotionRound | StageOutcome[PromotionReceipt]:
    """The sweep's one round (every member's best-k + last against the incumbent), or its stored decision."""
    return prepare_sweep_gate(open_home(home), members, policy.validated(PromotionPolicy), policy_name=policy.source_name, flow=flow_name())


@task(name="decide_sweep_gate", **STAGE_TASK)
def decide_gate(home: HomeRef, rnd: PromotionRound, gate: StageOutcome[EvaluationReceipt]) -> StageOutcome[PromotionReceipt]:
    """Judge every challenger on the one gate evaluation; at most one is promoted; aliases move in the receipt."""
    return decide_sweep_gate(open_home(home), rnd, gate, flow=flow_name())


@task(name="record_sweep", **STAGE_TASK)
def record_sweep(
    home: HomeRef, plan: PlanRef, training: PlanRef, audit_rid: str, base_sha: str | None,
    outcomes: list[StageOutcome[TrainingRunReceipt]], decision: StageOutcome[PromotionReceipt], policy: PlanRef,
) -> StageOutcome[SweepReceipt]:  # fmt: skip
    """The sweep receipt naming every member's run and the decision."""
    listed = [(m, ref, o) for (m, ref), o in zip(stage.members(plan, training), outcomes, strict=True)]
    policy_plan = policy.validated(PromotionPolicy)
    return stage.record_sweep(open_home(home), plan, training, audit_rid, base_sha, listed, decision, policy_plan, flow=flow_name())


def sweep_step(
    home: HomeRef, corpus: str, audit_rid: str, plan: PlanRef, plans_dir: str, base_sha: str | None = None
) -> StageOutcome[SweepReceipt]:
    """The sweep: members (concurrently, up to the plan's ``workers``), the one gate, the sweep receipt."""
    training, policy = stage.beside(plan, plans_dir)
    register_plan_task(home, training, TrainingPlan)
    register_plan_task(home, policy, PromotionPolicy)
    listed = stage.members(plan, training)
    plans = [ref for _, ref in listed]
    sweep_plan = plan.validated(SweepPlan)
    if sweep_plan.work_pool is not None:
        pool = sweep_plan.work_pool
        outcomes = train_members_on_pool(
            home, corpus, audit_rid, listed, base_sha, sweep_name=sweep_plan.name, pool=pool, slots=sweep_plan.workers
        )
    else:
        runner: Any = ThreadPoolTaskRunner(max_workers=sweep_plan.workers)  # its future type is Prefect's business
        outcomes = train_members.with_options(task_runner=runner)(home, corpus, audit_rid, plans, base_sha)
    named = [(m.name, o.receipt_id) for (m, _), o in zip(listed, outcomes, strict=True)]
    prepared = prepare_gate(home, named, policy)
    if isinstance(prepared, StageOutcome):
        decision = prepared
    else:
        gate = PlanRef.of(prepared.gate, prepared.gate_name)
        register_plan_task(home, gate, EvaluationPlan)
        evaluated = evaluate_plan(home, corpus, gate, prepared.bindings, prepared.gate_parents())
        decision = decide_gate(home, prepared, evaluated)
    return record_sweep(home, plan, training, audit_rid, base_sha, outcomes, decision, policy)


sweep = stage_flow(
    "sweep",
    sweep_step,
    module=__name__,
    plan_model=SweepPlan,
    verdict=stage.verdict,
    doc="Train every member of a sweep plan (a plan reference or file) and judge them all in one gate; no winner fails the run.",
)
