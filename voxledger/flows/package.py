"""Flow ``package``: package a checkpoint reproducibly, reload it in a fresh process, publish it."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, shared_store
from voxledger.stores.home import Home
from voxledger.tasks.packaging.run import PackageOutcome, package_adapter_fn


@task(name="package_adapter", **STAGE_TASK)
def package_adapter(home: str, run_rid: str, tree_sha: str, promotion_rid: str | None = None, eval_rids: tuple[str, ...] = (),
                    retention: str | None = None, probe_seed: int = 0) -> PackageOutcome:  # fmt: skip
    """Build the package of one checkpoint bound to its receipts; the checks fail the task when RED."""
    return package_adapter_fn(Home(home), run_rid, tree_sha, promotion_rid=promotion_rid, evaluation_rids=tuple(eval_rids),
                              retention_root=Path(retention) if retention else None, probe_seed=probe_seed, flow=flow_name())  # fmt: skip


@flow(name="package")
def package(home: str, run_rid: str, tree_sha: str, promotion_rid: str | None = None, eval_rids: tuple[str, ...] = (),
            retention: str | None = None, probe_seed: int = 0) -> PackageOutcome:  # fmt: skip
    """Package a training run's checkpoint (a LoRA tree digest)."""
    with shared_store(home):
        return announce(package_adapter(home, run_rid, tree_sha, promotion_rid, eval_rids, retention, probe_seed))
