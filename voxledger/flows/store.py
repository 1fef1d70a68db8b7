"""Flows ``store_put`` and ``prune_checkpoints`` (the two store commands that write receipts) and
``scrub_store`` (``store verify --deep``, also run on a schedule: ``flows.deploy.scrub_deployment``).

Like every stage they run under Prefect (each receipt names its flow and task run) and, against
a shared store (``HomeRef.shared_store`` / ``VOXLEDGER_SYNC``), pull before and push after. The
scrub records no receipt (it reports, and drops stat-cache entries that no longer hold), so it
neither pulls nor pushes.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.errors import VoxledgerError
from voxledger.schemas.prune import PruneReceipt
from voxledger.stores.home import HomeRef
from voxledger.stores.verify import VerifyReport, verify_store
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


@task(name="scrub_home", cache_policy=NONE)  # a check: never served from a cache, never retried
def scrub_task(home: HomeRef) -> VerifyReport:
    """``verify_store(deep=True)``: every object and every file the stat cache vouches for re-hashed."""
    shown: dict[str, int] = {}

    def progress(phase: str, done: int, total: int) -> None:
        if shown.get(phase, -1) < done * 10 // max(total, 1):  # about ten lines per phase
            shown[phase] = done * 10 // max(total, 1)
            report(f"{phase}: {done}/{total}")

    return verify_store(open_home(home), progress, deep=True)


@flow(name="scrub_store")
def scrub_store(home: HomeRef | str, fail_on_problems: bool = False) -> VerifyReport:
    """``voxledger store verify --deep``; the scheduled deployment passes ``fail_on_problems`` so a scrub
    that finds damage ends Failed in Prefect's run history, its lines in the error."""
    out = scrub_task(HomeRef.of(home))
    if fail_on_problems and out.problems:
        raise VoxledgerError(f"scrub found {len(out.problems)} problem(s): " + "; ".join(out.problems[:20]))
    return out
