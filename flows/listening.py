"""Flows of the listening stage: export packets for an evaluation, aggregate ratings when they arrive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from voxledger.stores.home import Home


@task(name="aggregate_ratings", cache_policy=NONE)
def aggregate_task(home: str, packet_set: str, submissions: list[str]) -> dict[str, Any]:
    """Verify every submission, unseal the key, screen raters and compute statistics."""
    from voxledger.tasks.listening.aggregate import aggregate_ratings

    out = aggregate_ratings(Home(home), packet_set, [Path(s) for s in submissions], flow="aggregate_ratings")
    return {"receipt_id": out.receipt_id, "cached": out.cached, "submissions": list(out.submission_receipts)}


@flow(name="aggregate_ratings")
def aggregate_ratings_flow(home: str, packet_set: str, submissions: list[str]) -> dict[str, Any]:
    """Run when submissions arrive (its own flow, outside the scheduled pipeline)."""
    return aggregate_task(home, packet_set, submissions)


@task(name="export_packets", cache_policy=NONE)
def export_task(home: str, evaluation: str, protocol_file: str, out_dir: str) -> dict[str, Any]:
    """Per-rater packets from an evaluation's audio."""
    from voxledger.tasks.listening.from_evaluation import export_packets_for_evaluation

    return export_packets_for_evaluation(Home(home), evaluation, Path(protocol_file), Path(out_dir))


@flow(name="export_packets")
def export_packets_flow(home: str, evaluation: str, protocol_file: str, out_dir: str) -> dict[str, Any]:
    """Export blind listening packets for an evaluation receipt."""
    return export_task(home, evaluation, protocol_file, out_dir)
