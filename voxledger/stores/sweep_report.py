"""A sweep's report, read from its receipts: the grid, each member's CV curve and gate values, the winner and why.

``voxledger sweep report`` prints it and the dashboard's sweep section draws it; both read the
sweep receipt, each member's training run and the one promotion decision with its gate
evaluation (the intervals each rule read), nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from voxledger.schemas.evaluation import Comparison, EvaluationReceipt, Interval
from voxledger.schemas.promotion import ChallengerDecision, PromotionReceipt
from voxledger.schemas.sweep import EpochLoss, GateValue, MemberReport, SweepReceipt, SweepReport
from voxledger.schemas.training import TrainingRunReceipt

Reader = Callable[[str, type[Any]], Any]
"""Reads a receipt by id as a model: ``ReceiptStore.read`` (the store) or ``dashboard_queries.receipt`` (the catalog)."""


def sweep_report(read: Reader, sweep_rid: str) -> SweepReport:
    """The report of sweep ``sweep_rid``, every receipt read through ``read``.

    Raises:
        ReceiptError or LookupError (whatever ``read`` raises): a receipt it names is missing or of another kind.
    """
    sweep: SweepReceipt = read(sweep_rid, SweepReceipt)
    r = sweep.result
    decision: PromotionReceipt = read(r.promotion, PromotionReceipt)
    gate = read(decision.parameters.evaluation, EvaluationReceipt).result
    comparisons = {(c.candidate, c.metric): c for c in gate.comparisons}
    means = {(s.candidate, m): iv for s in gate.summaries for m, iv in s.overall.items()}
    by_member: dict[str, list[GateValue]] = {}
    for c in decision.result.challengers:
        by_member.setdefault(c.name.rsplit("-epoch", 1)[0], []).extend(_values(c, comparisons, means))
    members, name = [], ""
    for m in r.members:
        receipt: TrainingRunReceipt = read(m.training_run, TrainingRunReceipt)
        run = receipt.result
        plan_name = str(receipt.parameters.effective_config.get("plan", {}).get("name", ""))  # type: ignore[union-attr]
        name = name or plan_name.removesuffix(f"-{m.name}")  # a member's plan is named <sweep>-<member>
        curve = tuple(EpochLoss(epoch=e.epoch, train_loss=e.train_loss, cv_loss=e.cv_loss) for e in run.epochs)
        members.append(
            MemberReport(
                name=m.name, settings=m.settings, training_run=m.training_run, best_epoch=m.best_epoch, best_cv_loss=m.best_cv_loss,
                curve=curve, gate=tuple(by_member.get(m.name, ())), won=m.name == r.promoted_member,
            )
        )  # fmt: skip
    set_values = [m.settings.model_dump(exclude_none=True) for m in r.members]
    axes = tuple(sorted({k for s in set_values for k in s if len({str(v.get(k)) for v in set_values}) > 1}))
    return SweepReport(
        sweep=sweep_rid, name=name,
        axes=axes, members=tuple(members), family=r.family, incumbent=decision.parameters.incumbent, promotion=r.promotion,
        promoted=r.promoted, promoted_member=r.promoted_member, why=_why(decision),
    )  # fmt: skip


def _values(
    c: ChallengerDecision, comparisons: dict[tuple[str, str], Comparison], means: dict[tuple[str, str], Interval]
) -> list[GateValue]:
    out = []
    for rule in c.rules:
        iv = _interval(rule.statistic, comparisons.get((c.name, rule.metric)), means.get((c.name, rule.metric)))
        out.append(
            GateValue(
                challenger=c.name, epoch=c.epoch, cv_loss=c.cv_loss, metric=rule.metric, statistic=rule.statistic, op=rule.op,
                threshold=rule.threshold, value=rule.value, low=iv.low if iv else None, high=iv.high if iv else None, passed=rule.passed,
            )
        )  # fmt: skip
    return out


def _interval(statistic: str, comparison: Comparison | None, mean: Interval | None) -> Interval | None:
    """The interval a rule's statistic is read from (as the gate reads it, ``tasks/stages/promote.judge``)."""
    if statistic == "challenger_mean":
        return mean
    if comparison is None:
        return None
    if statistic.startswith("delta_"):
        return comparison.delta
    f = comparison.failures
    if f is None:
        return None
    if statistic == "new_failure_rate_high":
        return f.new_failures
    return f.rate_delta if statistic == "failure_rate_delta_high" else f.kept


def _why(decision: PromotionReceipt) -> str:
    """Why the winner won (or why nothing did), in words."""
    cs = decision.result.challengers
    passing = sorted((c for c in cs if c.passed), key=lambda c: (c.cv_loss, c.epoch))
    rules = len(cs[0].rules) if cs else 0
    if not passing:
        closest = max(cs, key=lambda c: (sum(r.passed for r in c.rules), -c.cv_loss)) if cs else None
        near = f"; closest: {closest.name}, {sum(r.passed for r in closest.rules)} of {rules} rule(s) passed" if closest else ""
        return f"none of the {len(cs)} challengers passed every rule{near}"
    won = passing[0]
    return (
        f"{won.name} passed all {rules} rule(s) against the incumbent ({decision.parameters.incumbent}) and had the lowest CV loss "
        f"({won.cv_loss:.4g}) of the {len(passing)} challenger(s) of {len(cs)} that passed every rule"
    )
