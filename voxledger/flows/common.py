"""What every flow module shares: stage task options, the running flow's name, the home and plan
references a flow takes, and the shared-store wrapper around each stage."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from prefect import task
from prefect.cache_policies import NONE
from pydantic import BaseModel

from voxledger.schemas.errors import CatalogError, CatalogLockedError
from voxledger.stores.home import Home, HomeRef


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only what a second try can fix: a catalog held by another process, an I/O hiccup."""
    try:
        state.result()
    except CatalogLockedError:  # the caller said how long to wait (--lock-timeout): waiting again would ignore it
        return False
    except (CatalogError, TimeoutError, ConnectionError):
        return True
    except Exception:  # noqa: BLE001  (anything else is deterministic: fail once, with its reason)
        return False
    return False


# voxledger's own content-addressed cache (verified on reuse) decides what runs, so Prefect's
# result caching is off and a stage served from cache still reports its receipt.
STAGE_TASK: dict[str, Any] = {"cache_policy": NONE, "retries": 1, "retry_delay_seconds": 2, "retry_condition_fn": _transient}


def flow_name(default: str = "cli") -> str:
    """Name of the enclosing Prefect flow (recorded as each receipt's producer)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    return ctx.flow.name if ctx is not None and ctx.flow is not None else default


SYNC_VARIABLE = "VOXLEDGER_SYNC"


def sync_enabled(home: HomeRef | None = None) -> bool:
    """Whether this stage works against the shared store: the home reference says so, else
    ``VOXLEDGER_SYNC=1`` (set on workers by ``voxledger deploy --shared-store``)."""
    if home is not None and home.shared_store is not None:
        return home.shared_store
    from voxledger.settings import load_settings

    return load_settings().sync


def open_home(home: HomeRef | str | None) -> Home:
    """The home a flow parameter names, opened with the caller's lock timeout and read-only setting."""
    return HomeRef.of(home).open()


@contextmanager
def shared_store(home: HomeRef | str | None) -> Iterator[None]:
    """Around a stage on a worker: pull what other machines pushed (its inputs, verified) before it
    runs, push what it recorded after, also when it failed (a failure receipt is evidence too).

    Off unless ``sync_enabled()``. A push that fails while the stage itself failed is logged and
    the stage's own error is the one raised.
    """
    ref = HomeRef.of(home)
    if not sync_enabled(ref):
        yield
        return
    from prefect.logging import get_run_logger

    from voxledger.flows.sync import pull_task, push_task

    pull_task(ref)
    try:
        yield
    except BaseException:
        try:
            push_task(ref)
        except Exception as exc:  # noqa: BLE001  (the stage's own error matters more; this one is logged)
            get_run_logger().error("push after the failed stage failed too: %s", exc)
        raise
    push_task(ref)


@task(name="register_plan", **STAGE_TASK)
def register_plan_task(home: HomeRef, plan: Any, model: type[BaseModel]) -> str:
    """Register a stage's plan (a ``PlanRef``) as its own task run, before the stage's work task:
    the plan receipt is written here (once per plan and home), never inside the work task."""
    from voxledger.tasks.plans import register_plan

    rid, _ = register_plan(open_home(home), plan.validated(model), source_name=plan.source_name, flow=flow_name())
    return rid


RECEIPT_ARTIFACT = "voxledger-receipt"
OutcomeT = TypeVar("OutcomeT", bound=Any)


def announce(outcome: OutcomeT) -> OutcomeT:
    """Under ``VOXLEDGER_SYNC``, leave the stage's receipt id on its flow run as a Prefect artifact
    (key ``voxledger-receipt``), so a pipeline that dispatched this stage to another worker finds
    the receipt it pulls from the shared store. Returns ``outcome`` unchanged."""
    if sync_enabled():
        import json

        from prefect.artifacts import create_markdown_artifact

        doc = {"receipt": outcome.receipt_id, "cached": outcome.cached}  # a StageOutcome or PackageOutcome
        create_markdown_artifact(markdown=json.dumps(doc), key=RECEIPT_ARTIFACT, description="the receipt this stage recorded or reused")
    return outcome


def announced_receipt(flow_run_id: Any) -> tuple[str, bool] | None:
    """(receipt id, cached) a flow run announced, or None when it recorded nothing."""
    import json

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[RECEIPT_ARTIFACT])),
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
        )
    if not found:
        return None
    doc = json.loads(str(found[-1].data))
    return str(doc["receipt"]), bool(doc["cached"])
