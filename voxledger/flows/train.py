"""Flow ``train``: train (or resume, or serve from cache) under a frozen training plan.

Two tasks run the same training function, named by what they make: ``train_base`` (a full-mode
plan: a base model from scratch) and ``train_adapter`` (a LoRA plan), so the run history and the
receipt's producer say which it was.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home
from voxledger.flows.factory import stage_flow
from voxledger.flows.progress import report
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.train import run_training, training_task_name


def _train(home: HomeRef, corpus: str, audit_rid: str, plan: PlanRef, base_sha: str | None) -> StageOutcome[TrainingRunReceipt]:
    h, training = open_home(home), plan.validated(TrainingPlan)
    name = plan.source_name
    return run_training(h, Path(corpus), audit_rid, training, plan_name=name, base_sha=base_sha, flow=flow_name(), progress=report)


@task(name="train_base", **STAGE_TASK)
def train_base(home: HomeRef, corpus: str, audit_rid: str, plan: PlanRef, base_sha: str | None) -> StageOutcome[TrainingRunReceipt]:
    """Train a base model from a passing audit; a crashed run resumes from its last verified checkpoint."""
    return _train(home, corpus, audit_rid, plan, base_sha)


@task(name="train_adapter", **STAGE_TASK)
def train_adapter(home: HomeRef, corpus: str, audit_rid: str, plan: PlanRef, base_sha: str | None) -> StageOutcome[TrainingRunReceipt]:
    """Train an adapter from a passing audit; a crashed run resumes from its last verified checkpoint."""
    return _train(home, corpus, audit_rid, plan, base_sha)


def train_step(home: HomeRef, corpus: str, audit_rid: str, plan: PlanRef, base_sha: str | None = None) -> StageOutcome[TrainingRunReceipt]:
    """The task named by what the plan makes: ``train_base`` for a full-mode plan, else ``train_adapter``."""
    step = train_base if training_task_name(plan.validated(TrainingPlan)) == "train_base" else train_adapter
    return step(home, corpus, audit_rid, plan, base_sha)


train = stage_flow(
    "train", train_step, module=__name__, plan_model=TrainingPlan, doc="Train under a plan (a plan reference or file) from a passing audit."
)
