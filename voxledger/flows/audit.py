"""Flow ``audit``: audit a corpus under a frozen policy; a failing verdict fails the run."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home
from voxledger.flows.factory import stage_flow
from voxledger.flows.progress import report
from voxledger.schemas.audit import AuditPolicy, AuditReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages import audit as stage
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


audit = stage_flow(
    "audit",
    audit_corpus,
    module=__name__,
    plan_model=AuditPolicy,
    verdict=stage.verdict,
    doc="Audit ``corpus`` under a policy (a plan reference or file); no flag turns leakage off. A failing verdict fails the run.",
)
