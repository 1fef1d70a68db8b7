"""A toy stage for the stage-table tests: a flow and its task that (re)register the audit policy.

It is real (a Prefect flow and task, a plan receipt in the home) and cheap, so a test can add it
to the stage table with one entry and look for it everywhere the table reaches.
"""

from __future__ import annotations

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, open_home, shared_store
from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.core import PlanReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef, register_plan
from voxledger.tasks.stage import StageOutcome


@task(name="toy_register", **STAGE_TASK)
def toy_register(home: HomeRef, plan: PlanRef, corpus: str) -> StageOutcome[PlanReceipt]:
    """Register the audit policy again (served from the registry when it is already there)."""
    h = open_home(home)
    rid, _ = register_plan(h, plan.validated(AuditPolicy), source_name=plan.source_name, flow=flow_name())
    return StageOutcome(rid, h.receipts.read(rid, PlanReceipt), cached=True)


@flow(name="toy")
def toy(home: HomeRef | str, plan: PlanRef | str, corpus: str) -> StageOutcome[PlanReceipt]:
    """The toy stage as a deployable flow."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return announce(toy_register(ref, PlanRef.coerce(plan, AuditPolicy), corpus))
