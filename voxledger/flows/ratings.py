"""Flow ``ratings``: verify rater submissions, unblind them and record the aggregate."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, flow_name, shared_store
from voxledger.stores.home import HomeRef
from voxledger.tasks.stage import AggregateOutcome
from voxledger.tasks.stages.ratings import aggregate_ratings as aggregate_ratings_fn


@task(name="aggregate_ratings", **STAGE_TASK)
def aggregate_ratings(home: HomeRef, packet_set: str, submissions: list[str]) -> AggregateOutcome:
    """Verify every submission, unseal the key, screen raters and compute the statistics."""
    return aggregate_ratings_fn(home.open(), packet_set, [Path(s) for s in submissions], flow=flow_name())


@flow(name="ratings")
def ratings(home: HomeRef | str, packet_set: str, submissions: list[str]) -> AggregateOutcome:
    """Run when submissions arrive (outside the scheduled pipeline)."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return aggregate_ratings(ref, packet_set, submissions)
