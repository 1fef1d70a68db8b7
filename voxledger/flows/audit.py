"""Flow ``audit``: audit a corpus under a frozen policy; a failing verdict fails the run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, open_home, register_plan_task, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.audit import AuditPolicy, AuditReceipt
from voxledger.schemas.errors import AuditFailedError
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.audit import audit_corpus_fn


@task(name="audit_corpus", **STAGE_TASK)
def audit_corpus(home: HomeRef, corpus: str, plan: PlanRef, audio_roots: tuple[str, ...] = ()) -> StageOutcome[AuditReceipt]:
    """Audit the corpus and record the receipt, whatever the verdict (a failure is evidence too).

    ``audio_roots`` are folders outside the corpus its manifest may point into; they are not
    part of any identity (audio is known by its digest).
    """
    report(f"auditing {corpus}")
    roots = tuple(Path(r) for r in audio_roots)
    policy = plan.validated(AuditPolicy)
    h = open_home(home)
    return audit_corpus_fn(h, Path(corpus), policy, policy_name=plan.source_name, flow=flow_name(), audio_roots=roots, progress=report)


def require_pass(out: StageOutcome[AuditReceipt]) -> None:
    """Raise AuditFailedError (naming the receipt) unless the audit passed."""
    r = out.receipt.result
    if r.verdict != "pass":
        errors = r.counts_by_severity["error"]
        by_code = Counter(f.code for f in r.findings if f.severity == "error")
        warnings = r.counts_by_severity.get("warning", 0)
        raise AuditFailedError(
            f"audit of {out.receipt.parameters.corpus_name} failed: {errors} error finding(s) {dict(sorted(by_code.items()))}"
            f" (and {warnings} warning(s)); receipt {out.receipt_id} (voxledger receipt show {out.receipt_id[:12]} lists them)",
            receipt_id=out.receipt_id,
        )


@flow(name="audit")
def audit(home: HomeRef | str, corpus: str, plan: PlanRef | str, audio_roots: tuple[str, ...] = ()) -> StageOutcome[AuditReceipt]:
    """Audit ``corpus`` under a policy (a plan reference or file); no flag turns leakage off."""
    ref = HomeRef.of(home)
    plan_ref = PlanRef.coerce(plan, AuditPolicy)
    with shared_store(ref):
        register_plan_task(ref, plan_ref, AuditPolicy)
        out = announce(audit_corpus(ref, corpus, plan_ref, audio_roots))
    require_pass(out)
    return out
