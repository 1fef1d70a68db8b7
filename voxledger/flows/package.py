"""Flow ``package``: package a checkpoint reproducibly, reload it in a fresh process, publish it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, register_plan_task
from voxledger.flows.factory import stage_flow
from voxledger.schemas.equivalence import EquivalencePlan
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.stores.home import Home, HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import PackageOutcome, StageOutcome
from voxledger.tasks.stages.equivalence import record_equivalence
from voxledger.tasks.stages.package import package_adapter_fn

# the package's merged-export check, recorded by its own task run (nested in the package task)
compare_merged_export = task(name="compare_runtimes", **STAGE_TASK)(record_equivalence)


def _compare_as_tasks(home: Home, reference: str, candidate: str, plan: EquivalencePlan, **kwargs: Any) -> StageOutcome[EquivalenceReceipt]:
    """Register the probe's equivalence plan, then compare (``record_equivalence``'s arguments):
    two task runs, one receipt each."""
    register_plan_task(HomeRef.of(home), PlanRef.of(plan, str(kwargs["plan_name"])), EquivalencePlan)
    outcome: StageOutcome[EquivalenceReceipt] = compare_merged_export(home, reference, candidate, plan, **kwargs)
    return outcome


@task(name="package_adapter", **STAGE_TASK)
def package_adapter(
    home: HomeRef,
    run_rid: str,
    tree_sha: str,
    promotion_rid: str | None = None,
    eval_rids: tuple[str, ...] = (),
    retention: str | None = None,
    probe_seed: int = 0,
) -> PackageOutcome:
    """Build the package of one checkpoint bound to its receipts; the checks fail the task when RED."""
    retention_root = Path(retention) if retention else None
    return package_adapter_fn(
        open_home(home),
        run_rid,
        tree_sha,
        promotion_rid=promotion_rid,
        evaluation_rids=tuple(eval_rids),
        retention_root=retention_root,
        probe_seed=probe_seed,
        flow=flow_name(),
        compare=_compare_as_tasks,
    )


package = stage_flow("package", package_adapter, module=__name__, doc="Package a training run's checkpoint (a LoRA tree digest).")
