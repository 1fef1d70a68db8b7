"""Flow ``train``: train (or resume, or serve from cache) under a frozen training plan."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.training.run import train_adapter_fn


@task(name="train_adapter", **STAGE_TASK)
def train_adapter(home: str, corpus: str, audit_rid: str, plan_file: str, base_sha: str | None) -> StageOutcome[TrainingRunReceipt]:
    """Train from a passing audit; a crashed run resumes from its last verified checkpoint."""
    plan = load_plan(Path(plan_file), TrainingPlan)
    return train_adapter_fn(Home(home), Path(corpus), audit_rid, plan, plan_name=Path(plan_file).name, base_sha=base_sha,
                            flow=flow_name(), progress=report)  # fmt: skip


@flow(name="train")
def train(home: str, corpus: str, audit_rid: str, plan_file: str, base_sha: str | None = None) -> StageOutcome[TrainingRunReceipt]:
    """Train under a plan from a passing audit."""
    with shared_store(home):
        return announce(train_adapter(home, corpus, audit_rid, plan_file, base_sha))
