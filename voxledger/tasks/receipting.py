"""Helpers every task uses to describe what it read and wrote."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypeVar

from voxledger.schemas.base import Artifact, InputRef, Producer, ReceiptBase, utc_now
from voxledger.schemas.canonical import canonical_digest
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.identity import code_identity, environment

R = TypeVar("R", bound=ReceiptBase)


def artifact(store: LocalBlobStore, role: str, sha256: str, media_type: str) -> Artifact:
    """An output artifact record for a blob already in the store."""
    return Artifact(role=role, sha256=sha256, size_bytes=store.size_of(sha256), media_type=media_type)


def prefect_run_ids() -> tuple[str | None, str | None]:
    """(flow run id, task run id) of the Prefect run this thread is in; None where it is in none.

    Prefect is only consulted when something in this process imported it already (plain
    functions called without Prefect stay free of it).
    """
    import sys

    if "prefect.context" not in sys.modules:
        return None, None
    from prefect.context import FlowRunContext, TaskRunContext

    task_ctx, flow_ctx = TaskRunContext.get(), FlowRunContext.get()
    task_run = str(task_ctx.task_run.id) if task_ctx is not None else None
    flow_run = str(flow_ctx.flow_run.id) if flow_ctx is not None and flow_ctx.flow_run is not None else None
    if flow_run is None and task_ctx is not None and task_ctx.task_run.flow_run_id is not None:
        flow_run = str(task_ctx.task_run.flow_run_id)
    return flow_run, task_run


def cache_key(stage: str, inputs: dict[str, Any], plan_sha256: str | None, parameters: Any) -> str:
    """The whole truth of a stage's work: stage, input digests, plan, parameters and code."""
    return canonical_digest(
        {
            "stage": stage,
            "inputs": inputs,
            "plan_sha256": plan_sha256,
            "parameters": parameters,
            "code_sha256": code_identity().source_sha256,
        }
    )


def build_receipt(
    cls: type[R],
    *,
    flow: str,
    task: str,
    started_at: datetime,
    subjects: list[Artifact] | tuple[Artifact, ...] = (),
    inputs: list[InputRef] | tuple[InputRef, ...] = (),
    key: str | None = None,
    status: Literal["succeeded", "failed"] = "succeeded",
    error: str | None = None,
    device: str | None = None,
    **fields: Any,
) -> R:
    """Construct a receipt of ``cls`` with the environment, timestamps and Prefect run ids filled in;
    ``device``: the torch device the step computed on, where its backend chooses one (`compute_device`)."""
    flow_run_id, task_run_id = prefect_run_ids()
    env = environment()
    return cls(
        producer=Producer(flow=flow, task=task, flow_run_id=flow_run_id, task_run_id=task_run_id),
        subjects=tuple(subjects),
        inputs=tuple(inputs),
        environment=env if device is None else env.model_copy(update={"device": device}),
        cache_key=key,
        started_at=started_at,
        finished_at=utc_now(),
        status=status,
        error=error,
        **fields,
    )
