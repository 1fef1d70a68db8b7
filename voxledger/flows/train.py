"""Flow ``train``: train (or resume, or serve from cache) under a frozen training plan."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, open_home, register_plan_task, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.training.run import train_adapter_fn


@task(name="train_adapter", **STAGE_TASK)
def train_adapter(home: HomeRef, corpus: str, audit_rid: str, plan: PlanRef, base_sha: str | None) -> StageOutcome[TrainingRunReceipt]:
    """Train from a passing audit; a crashed run resumes from its last verified checkpoint."""
    h, training = open_home(home), plan.validated(TrainingPlan)
    name = plan.source_name
    return train_adapter_fn(h, Path(corpus), audit_rid, training, plan_name=name, base_sha=base_sha, flow=flow_name(), progress=report)


@flow(name="train")
def train(
    home: HomeRef | str, corpus: str, audit_rid: str, plan: PlanRef | str, base_sha: str | None = None
) -> StageOutcome[TrainingRunReceipt]:
    """Train under a plan (a plan reference or file) from a passing audit."""
    ref = HomeRef.of(home)
    plan_ref = PlanRef.coerce(plan, TrainingPlan)
    with shared_store(ref):
        register_plan_task(ref, plan_ref, TrainingPlan)
        return announce(train_adapter(ref, corpus, audit_rid, plan_ref, base_sha))
