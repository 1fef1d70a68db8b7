"""Prefect deployments of a pipeline plan: one per stage flow plus the pipeline, each on its work pool.

Each deployment is ``flow.from_source(<voxledger source dir>, <entrypoint>).deploy(...)``: the
code is loaded from a local directory, so a process worker on a machine holding the same checkout
runs it without any image or remote storage. The pipeline deployment carries the plan's cron
schedule and every parameter a run needs; the stage deployments carry the parameters known at
deploy time (home, corpus, plan file), the rest being given when a run is started.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voxledger.flows.stages import stage_names, stage_table
from voxledger.schemas.errors import PlanError
from voxledger.schemas.pipeline import PipelinePlan

PIPELINE_ENTRYPOINT = "voxledger/flows/pipeline.py:pipeline"


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment to register: its name, entrypoint, work pool, schedule and fixed parameters."""

    name: str
    entrypoint: str
    work_pool: str
    cron: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # set in the worker's flow-run process
    one_at_a_time: bool = False  # a run starting while another of this deployment runs is cancelled (and so recorded)


def source_dir() -> Path:
    """The directory holding the ``voxledger`` package (what ``from_source`` loads entrypoints from)."""
    return Path(__file__).resolve().parents[2]


def deployment_specs(plan: PipelinePlan, plan_file: Path, *, home: str, corpus: str, shared_store: bool = False) -> list[DeploymentSpec]:
    """Every deployment a plan asks for: its stages (those it runs) then the pipeline.

    With ``shared_store`` every deployment runs with ``VOXLEDGER_SYNC=1`` (pull before, push after;
    see ``flows.common.shared_store``) and ``home`` is left empty, so each worker uses its own
    local home (its ``VOXLEDGER_HOME``).

    Raises PlanError naming each stage in ``stage_pools`` that the plan does not run.
    """
    unknown = sorted(set(plan.stage_pools) - set(stage_names()))
    if unknown:
        raise PlanError(f"pipeline plan {plan.name!r}: stage_pools names unknown stage(s) {unknown}; stages are {list(stage_names())}")
    plans_dir = plan_file.resolve().parent
    env = {"VOXLEDGER_SYNC": "1"} if shared_store else {}
    if shared_store:
        home = ""
    specs: list[DeploymentSpec] = []
    for stage in stage_table():
        if not stage.enabled(plan):
            continue
        parameters: dict[str, Any] = {"home": home}
        if "corpus" in inspect.signature(stage.flow.fn).parameters:
            parameters["corpus"] = corpus
        named = stage.plan_file(plan)
        if named:
            parameters["plan"] = str(plans_dir / named)
        specs.append(DeploymentSpec(f"{plan.name}-{stage.name}", stage.entrypoint(), stage.work_pool(plan), None, parameters, env))
    unused = sorted(set(plan.stage_pools) - {s.name.removeprefix(f"{plan.name}-") for s in specs})
    if unused:
        raise PlanError(
            f"pipeline plan {plan.name!r} maps stage(s) {unused} to work pools but does not run them; remove them from stage_pools"
        )
    pipeline_params = {"home": home, "corpus": corpus, "plan_file": str(plan_file.resolve())}
    specs.append(
        DeploymentSpec(
            f"{plan.name}-pipeline",
            PIPELINE_ENTRYPOINT,
            plan.pool_of("pipeline"),
            plan.schedule_cron,
            pipeline_params,
            env,
            one_at_a_time=True,
        )
    )
    return specs


SCRUB_ENTRYPOINT = "voxledger/flows/store.py:scrub_store"


def scrub_deployment(home: str, cron: str, work_pool: str = "default") -> DeploymentSpec:
    """The scheduled scrub of one home (``voxledger store verify --deep --schedule CRON``): the
    ``scrub_store`` flow on ``cron``, failing its run when it finds damage, one run at a time.

    Raises PlanError when ``cron`` is not a five-field cron expression.
    """
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=cron)
        valid = len(cron.split()) == 5
    except ValidationError:
        valid = False
    if not valid:
        raise PlanError(f"--schedule {cron!r} is not a five-field cron expression, e.g. '0 4 * * 0' (Sundays at 04:00)")
    name = f"scrub-{Path(home).name.strip('.') or 'home'}"
    return DeploymentSpec(name, SCRUB_ENTRYPOINT, work_pool, cron, {"home": home, "fail_on_problems": True}, one_at_a_time=True)


def ensure_pools(names: set[str]) -> list[str]:
    """Create each missing work pool as a ``process`` pool; return the names created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    created: list[str] = []
    with get_client(sync_client=True) as client:
        for name in sorted(names):
            try:
                client.read_work_pool(name)
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(name=name, type="process"))
                created.append(name)
    return created


HEARTBEAT_S = 30
"""Seconds between a flow run's heartbeats (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` in every deployment)."""
CRASH_AFTER_S = 90
"""A running flow run whose heartbeats stop for this long (its worker was killed) is marked Crashed."""
ZOMBIE_AUTOMATION = "voxledger: mark flow runs without heartbeats crashed"


def ensure_zombie_automation(crash_after_s: float = CRASH_AFTER_S) -> str:
    """Create (once) the automation that marks a flow run Crashed when its heartbeats stop for
    ``crash_after_s`` without a final state: a SIGKILLed worker never reports its runs, which would
    otherwise stay Running. Returns the automation's id.

    A run killed before its first heartbeat (sent when it starts) is not covered; Prefect sends
    heartbeats every 30 s at the most, so ``crash_after_s`` must exceed that."""
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture

    try:
        found: Any = Automation.read(name=ZOMBIE_AUTOMATION)  # sync here (Prefect's dual sync/async methods)
        return str(found.id)
    except ValueError:  # not there yet
        pass
    ended = [f"prefect.flow-run.{s}" for s in ("Completed", "Failed", "Cancelled", "Crashed")]
    automation: Any = Automation(
        name=ZOMBIE_AUTOMATION,
        trigger=EventTrigger(
            posture=Posture.Proactive,
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *ended},
            match={"prefect.resource.id": ["prefect.flow-run.*"]},
            for_each={"prefect.resource.id"},
            threshold=1,
            within=timedelta(seconds=crash_after_s),
        ),
        actions=[
            ChangeFlowRunState(
                name=None, state=StateType.CRASHED, message=f"no heartbeat for {crash_after_s:g} s: its worker died", force=False
            )
        ],
    ).create()
    return str(automation.id)


def register(specs: list[DeploymentSpec], source: Path | None = None) -> list[str]:
    """Register every spec against the current Prefect API; return the deployment ids.

    Every deployment's runs send heartbeats, and the API gets the automation that marks a run
    whose heartbeats stop Crashed (``ensure_zombie_automation``).

    Flows are loaded from ``source`` (default: this checkout), never built into an image.
    """
    import contextlib
    import io

    from prefect import flow
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    # a schedule tick while the last run still runs is cancelled, not stacked (the runs would race on one home)
    one_at_a_time = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW)
    root = str(source or source_dir())
    ids: list[str] = []
    quiet = io.StringIO()  # Prefect prints a table and hints per deployment; the caller reports instead
    for spec in specs:
        loaded: Any = flow.from_source(source=root, entrypoint=spec.entrypoint)
        with contextlib.redirect_stdout(quiet):
            deployment_id = loaded.deploy(
                name=spec.name,
                work_pool_name=spec.work_pool,
                cron=spec.cron,
                parameters=spec.parameters,
                job_variables={"env": {**spec.env, "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}},
                concurrency_limit=one_at_a_time if spec.one_at_a_time else None,
                build=False,
                push=False,
                print_next_steps=False,
                ignore_warnings=True,
            )
        ids.append(str(deployment_id))
    ensure_zombie_automation()
    return ids
