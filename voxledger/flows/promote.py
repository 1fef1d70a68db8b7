"""Flow ``promote``: gate a run's checkpoints against the champion; failing gates fail the run."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, announce, flow_name, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.errors import GateFailedError
from voxledger.schemas.promotion import PromotionPolicy, PromotionReceipt
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan
from voxledger.tasks.promotion.run import promote_adapter_fn
from voxledger.tasks.stage import StageOutcome


@task(name="promote_adapter", **STAGE_TASK)
def promote_adapter(home: str, corpus: str, run_rid: str, policy_file: str) -> StageOutcome[PromotionReceipt]:
    """Evaluate best-k + last against the incumbent; aliases move inside the receipt."""
    policy = load_plan(Path(policy_file), PromotionPolicy)
    return promote_adapter_fn(Home(home), run_rid, policy, policy_name=Path(policy_file).name, corpus=Path(corpus),
                              flow=flow_name(), progress=report)  # fmt: skip


def require_promoted(out: StageOutcome[PromotionReceipt]) -> None:
    """Raise GateFailedError (naming the receipt) unless a challenger was promoted."""
    if out.receipt.result.promoted is None:
        raise GateFailedError(f"{out.receipt.error}; receipt {out.receipt_id}", receipt_id=out.receipt_id)


@flow(name="promote")
def promote(home: str, corpus: str, run_rid: str, policy_file: str) -> StageOutcome[PromotionReceipt]:
    """Promote through gates; the receipt is written before a failing gate fails the run."""
    with shared_store(home):
        out = announce(promote_adapter(home, corpus, run_rid, policy_file))
    require_promoted(out)
    return out
