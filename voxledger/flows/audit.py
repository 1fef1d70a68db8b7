"""Flow ``audit``: audit a corpus under a frozen policy; a failing verdict fails the run."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.audit import AuditPolicy, AuditReceipt
from voxledger.schemas.errors import AuditFailedError
from voxledger.stores.home import Home
from voxledger.tasks.audit.run import audit_corpus_fn
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stage import StageOutcome


@task(name="audit_corpus", **STAGE_TASK)
def audit_corpus(home: str, corpus: str, policy_file: str, audio_roots: tuple[str, ...] = ()) -> StageOutcome[AuditReceipt]:
    """Audit the corpus and record the receipt, whatever the verdict (a failure is evidence too).

    ``audio_roots`` are folders outside the corpus its manifest may point into; they are not
    part of any identity (audio is known by its digest).
    """
    policy = load_plan(Path(policy_file), AuditPolicy)
    report(f"auditing {corpus}")
    return audit_corpus_fn(Home(home), Path(corpus), policy, policy_name=Path(policy_file).name, flow=flow_name(),
                           audio_roots=tuple(Path(r) for r in audio_roots), progress=report)  # fmt: skip


def require_pass(out: StageOutcome[AuditReceipt], corpus: str) -> None:
    """Raise AuditFailedError (naming the receipt) unless the audit passed."""
    r = out.receipt.result
    if r.verdict != "pass":
        raise AuditFailedError(
            f"audit of {corpus} failed: {r.counts_by_severity['error']} error finding(s) {r.counts_by_code}; receipt {out.receipt_id}",
            receipt_id=out.receipt_id,
        )


@flow(name="audit")
def audit(home: str, corpus: str, policy_file: str, audio_roots: tuple[str, ...] = ()) -> StageOutcome[AuditReceipt]:
    """Audit ``corpus`` under ``policy_file``; no flag turns leakage off."""
    with shared_store(home):
        out = announce(audit_corpus(home, corpus, policy_file, audio_roots))
    require_pass(out, corpus)
    return out
