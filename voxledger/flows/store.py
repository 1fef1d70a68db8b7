"""Flows ``store_put`` and ``prune_checkpoints``: the two store commands that write receipts.

Like every stage they run under Prefect (each receipt names its flow and task run) and, against
a shared store (``HomeRef.shared_store`` / ``VOXLEDGER_SYNC``), pull before and push after.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.prune import PruneReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.stages.checkpoints import execute_plan
from voxledger.tasks.stages.store import ingest_path


@task(name="ingest_path", **STAGE_TASK)
def ingest_task(home: HomeRef, path: str) -> tuple[str, str]:
    """Store a file or directory and record its ingest receipt: (receipt id, content digest)."""
    report(f"storing {path}")
    return ingest_path(open_home(home), Path(path), flow=flow_name("store_put"))


@flow(name="store_put")
def store_put(home: HomeRef | str, path: str) -> tuple[str, str]:
    """``voxledger store put``."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return ingest_task(ref, path)


@task(name="prune_checkpoints", cache_policy=NONE)  # never retried: a second try would see blobs already gone
def prune_task(home: HomeRef, plan_file: str) -> tuple[str, PruneReceipt]:
    """Execute a reviewed prune plan exactly and record the prune receipt."""
    return execute_plan(open_home(home), Path(plan_file), flow=flow_name("prune_checkpoints"))


@flow(name="prune_checkpoints")
def prune_checkpoints(home: HomeRef | str, plan_file: str) -> tuple[str, PruneReceipt]:
    """``voxledger checkpoints prune --execute``."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return prune_task(ref, plan_file)
