"""Flows ``push`` and ``pull``: publish a home's receipts and blobs to the shared S3 store, ingest others'.

Both are incremental (``voxledger.stores.sync``): a push sends only what the bucket lacks, a pull
of an unchanged bucket is one listing. Transient store errors (connection drops, timeouts,
throttling, 5xx answers) are retried by Prefect with backoff; every copy is idempotent and
create-only, so a retry, or a push killed half way and run again, never leaves a partial object
or a receipt whose blobs are missing (blobs go up before the receipt, the receipt before its
marker and journal segment).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE

from voxledger.stores.home import HomeRef

TRANSIENT_S3_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError", "ServiceUnavailable"}


def transient_store_error(exc: BaseException) -> bool:
    """Whether a second try can fix ``exc``: a dropped or refused connection, a timeout, throttling, a 5xx."""
    from botocore.exceptions import ClientError, ConnectionClosedError, IncompleteReadError, ReadTimeoutError, ResponseStreamingError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    broke_off = (IncompleteReadError, ResponseStreamingError, ConnectionClosedError)  # a body cut short: the connection failed
    for e in _chain(exc):
        if isinstance(e, (ConnectionError, TimeoutError, BotoConnectionError, ReadTimeoutError, *broke_off)):
            return True
        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if status >= 500 or err.get("Code") in TRANSIENT_S3_CODES:
                return True
    return False


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001  (classified, not swallowed: the task fails when this says no)
        return transient_store_error(exc)
    return False


SYNC_TASK: dict[str, Any] = {"cache_policy": NONE, "retries": 3, "retry_delay_seconds": [1, 4, 15], "retry_condition_fn": _retry_transient}


@task(name="push_to_shared_store", **SYNC_TASK)
def push_task(home: HomeRef, full: bool = False) -> dict[str, Any]:
    """Copy the home's receipts the shared store lacks, and the blobs they name (``push_to``)."""
    from voxledger.stores.s3 import S3BlobStore
    from voxledger.stores.sync import push_to

    remote = S3BlobStore.from_env()
    return {"store": remote.url, **asdict(push_to(home.open(), remote, full=full))}


@task(name="pull_from_shared_store", **SYNC_TASK)
def pull_task(home: HomeRef, full: bool = False) -> dict[str, Any]:
    """Ingest what the shared store added since the last pull, verified (``ingest_from``)."""
    from voxledger.stores.s3 import S3BlobStore
    from voxledger.stores.sync import ingest_from

    remote = S3BlobStore.from_env()
    return {"store": remote.url, **asdict(ingest_from(remote, home.open(), full=full))}


@flow(name="push")
def push(home: HomeRef | str, full: bool = False) -> dict[str, Any]:
    """Publish this home's receipts and blobs to the shared store named by ``VOXLEDGER_S3_*``."""
    return push_task(HomeRef.of(home), full)


@flow(name="pull")
def pull(home: HomeRef | str, full: bool = False) -> dict[str, Any]:
    """Ingest the shared store's new receipts and blobs into this home and its catalog."""
    return pull_task(HomeRef.of(home), full)
