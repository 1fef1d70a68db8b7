"""Flow ``audit_corpus``: audit a corpus under a frozen policy; a failing verdict fails the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.errors import AuditFailedError
from voxledger.stores.home import Home
from voxledger.tasks.audit.run import audit_corpus_fn
from voxledger.tasks.plans import load_plan


@task(name="audit_corpus_files", retries=0)
def audit_task(home_root: str, corpus: str, policy_path: str) -> dict[str, Any]:
    """Run the audit and return a small summary (ids and counts, never audio)."""
    home = Home(home_root)
    policy = load_plan(Path(policy_path), AuditPolicy)
    out = audit_corpus_fn(home, Path(corpus), policy, policy_name=Path(policy_path).name)
    r = out.receipt.result
    return {"receipt_id": out.receipt_id, "verdict": r.verdict, "cached": out.cached,
            "counts_by_code": r.counts_by_code, "counts_by_severity": r.counts_by_severity}  # fmt: skip


@flow(name="audit_corpus", log_prints=False)
def audit_corpus(corpus: str, policy: str, home: str | None = None, fail_on_error: bool = True) -> dict[str, Any]:
    """Audit ``corpus`` under ``policy``; raise AuditFailedError (run Failed) on a failing verdict."""
    summary = audit_task(str(Home(home).root), corpus, policy)
    if fail_on_error and summary["verdict"] == "fail":
        raise AuditFailedError(
            f"audit of {corpus} failed: {summary['counts_by_severity']['error']} error finding(s) "
            f"{ {k: v for k, v in summary['counts_by_code'].items()} }; receipt {summary['receipt_id']}"
        )
    return summary
