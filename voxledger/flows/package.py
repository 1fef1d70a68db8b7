"""Flow ``package``: package a checkpoint reproducibly, reload it in a fresh process, publish it."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, open_home, shared_store
from voxledger.stores.home import HomeRef
from voxledger.tasks.packaging.run import PackageOutcome, package_adapter_fn


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
    )


@flow(name="package")
def package(
    home: HomeRef | str,
    run_rid: str,
    tree_sha: str,
    promotion_rid: str | None = None,
    eval_rids: tuple[str, ...] = (),
    retention: str | None = None,
    probe_seed: int = 0,
) -> PackageOutcome:
    """Package a training run's checkpoint (a LoRA tree digest)."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return announce(package_adapter(ref, run_rid, tree_sha, promotion_rid, eval_rids, retention, probe_seed))
