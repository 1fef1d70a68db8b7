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
    **fields: Any,
) -> R:
    """Construct a receipt of ``cls`` with the environment and timestamps filled in."""
    return cls(
        producer=Producer(flow=flow, task=task),
        subjects=tuple(subjects),
        inputs=tuple(inputs),
        environment=environment(),
        cache_key=key,
        started_at=started_at,
        finished_at=utc_now(),
        status=status,
        error=error,
        **fields,
    )
