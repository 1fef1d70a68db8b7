"""What every flow module shares: the stage task options and the name of the running flow."""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import NONE

from voxledger.schemas.errors import CatalogError


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only what a second try can fix: a catalog held by another process, an I/O hiccup."""
    try:
        state.result()
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
