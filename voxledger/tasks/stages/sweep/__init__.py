"""Stage ``sweep``: a training plan varied along axes, every member an ordinary training run, one gate over all.

The plain-function form (``run``): members trained by a local pool of processes, then the one
gate (``tasks/stages/sweep/gate.py``), then the sweep receipt naming every member and the decision. The
``sweep`` flow (``flows/sweep.py``) runs the same steps as Prefect tasks, members concurrently.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.errors import GateFailedError, PlanError
from voxledger.schemas.promotion import PromotionPolicy, PromotionReceipt
from voxledger.schemas.sweep import (
    SweepMember,
    SweepParameters,
    SweepPlan,
    SweepReceipt,
    SweepResult,
    SweepSettings,
    SweepVariant,
    sweep_members,
)
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import Home, HomeRef
from voxledger.tasks.plans import PlanRef, register_plan
from voxledger.tasks.receipting import build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, record, reuse
from voxledger.tasks.stages.contract import not_in_pipeline
from voxledger.tasks.stages.promote import evaluate_gate
from voxledger.tasks.stages.sweep.gate import decide_sweep_gate, member_of, prepare_sweep_gate, sweep_family
from voxledger.tasks.stages.sweep.members import train_member

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.reproduce import Preparation


def beside(plan: PlanRef, plans_dir: str | Path) -> tuple[PlanRef, PlanRef]:
    """The training plan and the promotion policy a sweep plan names, read from ``plans_dir`` (its folder).

    Raises:
        PlanError: a named file is missing or invalid, or a member's derived plan does not validate.
    """
    sweep = plan.validated(SweepPlan)
    folder = Path(plans_dir)
    training = PlanRef.load(folder / sweep.training, TrainingPlan)
    policy = PlanRef.load(folder / sweep.policy, PromotionPolicy)
    members(plan, training)  # every member's plan validates before anything trains
    return training, policy


def members(plan: PlanRef, training: PlanRef) -> list[tuple[SweepVariant, PlanRef]]:
    """Each member and its derived training plan, as a plan reference named ``<sweep file>#<member>``."""
    sweep, base = plan.validated(SweepPlan), training.validated(TrainingPlan)
    try:
        derived = sweep_members(sweep, base)
    except ValueError as exc:
        raise PlanError(f"sweep plan {plan.source_name}: {exc}") from exc
    return [(m, PlanRef.of(p, f"{plan.source_name}#{m.name}")) for m, p in derived]


def record_sweep(
    home: Home,
    plan: PlanRef,
    training: PlanRef,
    audit_rid: str,
    base_sha: str | None,
    outcomes: list[tuple[SweepVariant, PlanRef, StageOutcome[TrainingRunReceipt]]],
    decision: StageOutcome[PromotionReceipt],
    policy: PromotionPolicy,
    *,
    flow: str = "sweep",
) -> StageOutcome[SweepReceipt]:
    """The sweep receipt: every member's run, the family and the decision (served from cache when recorded before)."""
    sweep = plan.validated(SweepPlan)
    plan_rid, sweep_sha = register_plan(home, sweep, source_name=plan.source_name, flow=flow)
    runs = [o.receipt_id for _, _, o in outcomes]
    key = cache_key("sweep", {"runs": runs, "promotion": decision.receipt_id}, sweep_sha, {})
    if (hit := reuse(home, key, SweepReceipt)) is not None:
        return hit
    result = decision.receipt.result
    judged = Counter(member_of(c.name) for c in result.challengers)
    rows = tuple(
        SweepMember(
            name=m.name, settings=SweepSettings.model_validate(m.model_dump(exclude={"name"})), plan_sha256=ref.sha256,
            training_run=o.receipt_id, best_epoch=o.receipt.result.best_epoch, best_cv_loss=o.receipt.result.best_cv_loss,
            challengers=judged[m.name],
        )
        for m, ref, o in outcomes
    )  # fmt: skip
    receipt = build_receipt(
        SweepReceipt,
        flow=flow,
        task="record_sweep",
        started_at=utc_now(),
        key=key,
        inputs=[
            InputRef(role="plan", sha256=plan_rid, ref="receipt"),
            InputRef(role="promotion", sha256=decision.receipt_id, ref="receipt"),
            *(InputRef(role=f"member:{m.name}", sha256=o.receipt_id, ref="receipt") for m, _, o in outcomes),
        ],
        parameters=SweepParameters(
            sweep_plan_sha256=sweep_sha,
            training_plan_sha256=training.sha256,
            policy_sha256=decision.receipt.parameters.policy_sha256,
            audit_receipt=audit_rid,
            base_sha256=base_sha,
            workers=sweep.workers,
            threads_per_member=sweep.threads_per_member,
            work_pool=sweep.work_pool,
        ),  # fmt: skip
        result=SweepResult(
            members=rows,
            family=sweep_family(len(outcomes), len(result.challengers), policy),
            promotion=decision.receipt_id,
            promoted_member=member_of(result.promoted) if result.promoted else None,
            promoted=result.promoted,
            members_trained=sum(not o.cached for _, _, o in outcomes),
        ),
    )
    return record(home, receipt)


def train_members_locally(
    home: Home, corpus: Path, audit_rid: str, listed: list[tuple[SweepVariant, PlanRef]], *, base_sha: str | None, workers: int, flow: str
) -> list[tuple[SweepVariant, PlanRef, StageOutcome[TrainingRunReceipt]]]:
    """Every member's run, at most ``workers`` training at once (each in its own process), in the sweep's order."""
    ref = HomeRef.of(home)

    def train(item: tuple[SweepVariant, PlanRef]) -> StageOutcome[TrainingRunReceipt]:
        p = item[1]
        return train_member(ref, str(corpus), audit_rid, p.validated(TrainingPlan), plan_name=p.source_name, base_sha=base_sha, flow=flow)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [(m, p, o) for (m, p), o in zip(listed, pool.map(train, listed), strict=True)]


def gate_members(home: Home, corpus: Path, named: list[tuple[str, str]], policy: PlanRef, *, flow: str) -> StageOutcome[PromotionReceipt]:
    """The one decision over ``named`` members ((name, training run id)): prepared, evaluated once, decided."""
    prepared = prepare_sweep_gate(home, named, policy.validated(PromotionPolicy), policy_name=policy.source_name, flow=flow)
    if isinstance(prepared, StageOutcome):
        return prepared
    return decide_sweep_gate(home, prepared, evaluate_gate(home, prepared, corpus, flow=flow), flow=flow)


def sweep_fn(
    home: Home, corpus: Path, audit_rid: str, plan: PlanRef, *, plans_dir: Path, base_sha: str | None = None, flow: str = "sweep"
) -> StageOutcome[SweepReceipt]:
    """Train every member (at most ``workers`` at once, each in its own process), gate them together, record the sweep."""
    training, policy = beside(plan, plans_dir)
    sweep = plan.validated(SweepPlan)
    outcomes = train_members_locally(home, corpus, audit_rid, members(plan, training), base_sha=base_sha, workers=sweep.workers, flow=flow)
    decision = gate_members(home, corpus, [(m.name, o.receipt_id) for m, _, o in outcomes], policy, flow=flow)
    return record_sweep(home, plan, training, audit_rid, base_sha, outcomes, decision, policy.validated(PromotionPolicy), flow=flow)


# The stage contract (tasks/stages/contract.py). A sweep runs on its own: the pipeline's later
# stages (evaluate, package) take one training run and its promotion, and a sweep is many runs.
run = sweep_fn
inputs = not_in_pipeline


def verdict(out: StageOutcome[SweepReceipt]) -> None:
    """Raise GateFailedError (naming the decision) when no challenger of any member was promoted."""
    r = out.receipt.result
    if r.promoted is None:
        raise GateFailedError(
            f"no challenger of the sweep's {len(r.members)} members passed every gate ({r.family.challengers} judged in one family); "
            f"next: voxledger receipt show {r.promotion[:16]}   (every challenger's rule values)",
            receipt_id=out.receipt_id,
        )


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """Never called: sweep receipts are not re-run (the row's ``not_rerun`` says why)."""
    from voxledger.schemas.errors import ReproductionError

    raise ReproductionError(f"receipt {prep.rid[:12]} is a sweep: reproduce one of its members (voxledger reproduce MEMBER_RUN)")


def compare(h: Home, s: Home, original: SweepReceipt, rerun: SweepReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """Never called: sweep receipts are not re-run (the row's ``not_rerun`` says why)."""
    return []


def summary(receipt: SweepReceipt) -> str:
    """Members, the family, and the winner."""
    r = receipt.result
    won = f"{r.promoted} promoted (member {r.promoted_member})" if r.promoted else "nothing promoted"
    return (
        f"{len(r.members)} members ({r.members_trained} trained, the rest cached), {r.family.challengers} challengers in one family: {won}"
    )
