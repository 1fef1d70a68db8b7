"""Sweep members on a Prefect work pool: each member one run of flow ``sweep_member`` on a worker, over the shared store.

Where a sweep plan names a ``work_pool``, the sweep flow dispatches instead of training
(``train_members_on_pool``): it registers the deployment ``sweep_member/<sweep name>`` on that
pool with the shared store on (a worker pulls the audit and base before a member and pushes its
run after, into the worker's own home), sets the pool's device slots (a Prefect global
concurrency limit ``voxledger-devices-<pool>`` of the sweep's ``workers`` slots, which every member
holds while it trains), pushes what the members need, and starts one flow run for each member
its home does not already hold (the training stage's own key: ``stored_member``). Each member is
the training stage's own task in the worker's flow-run process (a process per member, so no
state is shared), recorded as an ordinary training run.

A worker killed mid-training pushes nothing of the member (a push follows the stage), so the
bucket never holds a partial run. Its flow run ends Crashed (the automation ``voxledger deploy``
installs marks a run whose heartbeats stop Crashed within 90 s), and the dispatcher starts that
member again, up to ``MEMBER_ATTEMPTS`` times, on whichever worker is free: on the killed
worker's home it resumes from the last checkpoint, elsewhere it trains again. A member whose run
fails (an error, not a death) stops the sweep with that run's message. A sweep killed itself is
run again as it was: members recorded in the bucket are pulled and served, the rest dispatched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow

from voxledger.flows.common import announce, announced_receipt, register_plan_task, shared_store
from voxledger.flows.progress import report
from voxledger.flows.train import train_step
from voxledger.schemas.errors import TrainingError
from voxledger.schemas.sweep import SweepVariant
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.sweep.members import stored_member

MEMBER_ENTRYPOINT = "voxledger/flows/sweep_pool.py:sweep_member"
MEMBER_ATTEMPTS = 3
"""Flow runs one member may take: a run that dies with its worker (Crashed, no receipt) is started again."""
SLOT_LEASE_S = 60
"""A device slot's lease (Prefect's shortest): a slot held by a killed worker returns after this long."""
POLL_S = 1.0


def device_slots(pool: str) -> str:
    """The global concurrency limit holding ``pool``'s device slots."""
    return f"voxledger-devices-{pool}"


@contextmanager
def device_slot(name: str) -> Iterator[None]:
    """Hold one slot of the global concurrency limit ``name`` (waiting for one to be free)."""
    from prefect.concurrency.sync import concurrency

    with concurrency(name, occupy=1, lease_duration=SLOT_LEASE_S, strict=True):
        yield


@flow(name="sweep_member")
def sweep_member(
    home: HomeRef | str, corpus: str, audit_rid: str, plan: PlanRef, base_sha: str | None, slots: str
) -> StageOutcome[TrainingRunReceipt]:
    """One sweep member on a worker: its ordinary training run (the training stage's task), trained
    while holding one of the device slots ``slots``; pulled inputs before, pushed run after."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        register_plan_task(ref, plan, TrainingPlan)
        with device_slot(slots):
            out = train_step(ref, corpus, audit_rid, plan, base_sha)
        return announce(out)


def prepare_pool(sweep_name: str, pool: str, slots: int) -> tuple[str, str]:
    """The member deployment on ``pool`` (registered or updated) and its device slots set to ``slots``:
    (deployment name, slots name)."""
    from prefect.client.orchestration import get_client

    from voxledger.flows.deploy import DeploymentSpec, ensure_pools, register

    ensure_pools({pool})
    register([DeploymentSpec(sweep_name, MEMBER_ENTRYPOINT, pool, None, {"home": ""}, {"VOXLEDGER_SYNC": "1"})])
    name = device_slots(pool)
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, slots)
    return f"sweep_member/{sweep_name}", name


def train_members_on_pool(
    home: HomeRef, corpus: str, audit_rid: str, listed: list[tuple[SweepVariant, PlanRef]], base_sha: str | None, *,
    sweep_name: str, pool: str, slots: int,
) -> list[StageOutcome[TrainingRunReceipt]]:  # fmt: skip
    """Every member's run in the sweep's order: served from this home, else trained by a worker of ``pool``.

    Raises:
        TrainingError: a member's flow run failed (its message), or died ``MEMBER_ATTEMPTS`` times.
    """
    from prefect.deployments import run_deployment

    from voxledger.flows.sync import pull_task, push_task

    deployment, slot_name = prepare_pool(sweep_name, pool, slots)
    h = home.open()
    pull_task(home)  # members another run of this sweep recorded are served, not trained again
    outcomes: dict[int, StageOutcome[TrainingRunReceipt]] = {}
    for i, (_, ref) in enumerate(listed):
        if (hit := stored_member(h, Path(corpus), audit_rid, ref.validated(TrainingPlan), base_sha=base_sha)) is not None:
            outcomes[i] = hit
    push_task(home)  # the audit, the base and the plans each worker pulls

    def start(i: int) -> Any:
        m, ref = listed[i]
        params = {"corpus": corpus, "audit_rid": audit_rid, "plan": ref.model_dump(mode="json"), "base_sha": base_sha, "slots": slot_name}
        run: Any = run_deployment(deployment, parameters=params, timeout=0, tags=[f"sweep:{sweep_name}", f"member:{m.name}"])
        report(f"sweep member {m.name}: flow run {run.name} on work pool {pool}")
        return run.id

    pending = {i: start(i) for i in range(len(listed)) if i not in outcomes}
    tries = dict.fromkeys(pending, 1)
    while pending:
        time.sleep(POLL_S)
        for i, run_id in list(pending.items()):
            ended = _ended(run_id)
            if ended is None:
                continue
            del pending[i]
            got = outcome_of(home, run_id, ended, listed[i][0].name, pool)
            if got is not None:
                outcomes[i] = got
            elif tries[i] < MEMBER_ATTEMPTS:
                tries[i] += 1
                report(f"sweep member {listed[i][0].name}: its flow run died with its worker ({ended}); starting it again")
                pending[i] = start(i)
            else:
                raise TrainingError(
                    f"sweep member {listed[i][0].name}: {MEMBER_ATTEMPTS} flow runs on work pool {pool} died without recording a run "
                    f"(last: {ended}); check the pool's workers, then run the sweep again (finished members are served)"
                )
    return [outcomes[i] for i in range(len(listed))]


def _ended(run_id: Any) -> str | None:
    """``'<state>: <message>'`` once the flow run is in a final state, else None."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(run_id).state
    if state is None or not state.is_final():
        return None
    return f"{state.type.value}: {state.message or ''}".strip()


def outcome_of(home: HomeRef, run_id: Any, ended: str, member: str, pool: str) -> StageOutcome[TrainingRunReceipt] | None:
    """The member's run a finished flow run recorded (pulled from the shared store), or None when the
    run died without recording one (Crashed: start it again).

    Raises TrainingError when the run failed on its own (an error a second run would repeat)."""
    from voxledger.flows.sync import pull_task

    got = announced_receipt(run_id)
    if got is None:
        if ended.startswith("CRASHED"):
            return None
        raise TrainingError(f"sweep member {member}: its flow run on work pool {pool} ended {ended}; see that run's logs in Prefect")
    pull_task(home)
    rid, cached = got
    return StageOutcome(rid, home.open().receipts.read(rid, TrainingRunReceipt), cached)
