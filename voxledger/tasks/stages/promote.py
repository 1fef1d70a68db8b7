"""``promote_adapter`` as a plain function.

Longer than 500 lines on purpose: a round's challengers, its incumbent on its model line, its gate,
the rules judged and the aliases moved are decided together and recorded in one receipt, and the
stage's contract (re-run, comparison, summary) sits with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.errors import GateFailedError
from voxledger.schemas.evaluation import OWN_BASE, Candidate, Comparison, EvaluationPlan, EvaluationReceipt, Interval
from voxledger.schemas.promotion import (
    BASE_VOICE,
    PAIRED_STATISTICS,
    AliasMove,
    ChallengerDecision,
    GatePlan,
    GateRule,
    PromotionParameters,
    PromotionPolicy,
    PromotionReceipt,
    PromotionResult,
    RuleValue,
    model_line,
)
from voxledger.schemas.training import CheckpointReceipt, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.queries import latest_alias_move, promotion_that_moved
from voxledger.tasks.plans import check_plan, plan_digest, register_plan
from voxledger.tasks.power import policy_power, power_warning, round_confidence
from voxledger.tasks.receipting import build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, record, reuse
from voxledger.tasks.stages.contract import need_corpus
from voxledger.tasks.stages.evaluate import evaluate_plan_fn

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.contract import StageContext
    from voxledger.tasks.stages.reproduce import Preparation


@dataclass(frozen=True)
class AliasState:
    """Where an alias points now, and the base it serves on."""

    target_sha256: str
    base_sha256: str | None
    receipt_sha256: str


def alias_state(home: Home, line: str, alias: str) -> AliasState | None:
    """The current target of ``line``'s ``alias`` (its latest move), or None."""
    row = latest_alias_move(home.catalog, line, alias)
    return AliasState(*row) if row else None


def run_voice(run: TrainingRunReceipt) -> str | None:
    """The speaker a run added (its plan's ``new_speaker``), None for a run that added none."""
    plan = run.parameters.effective_config.get("plan")
    voice = plan.get("new_speaker") if isinstance(plan, dict) else None
    return voice if isinstance(voice, str) else None


def line_of(run: TrainingRunReceipt, run_rid: str, policy: PromotionPolicy, policy_name: str) -> str:
    """The model line a promotion of ``run`` moves aliases in: the run's own (its voice and backend).

    Raises GateFailedError when the policy names another line: a policy's gate prompts,
    references and incumbent belong to one voice, and a run is never judged against, or moves
    the aliases of, another voice's line.
    """
    own = model_line(run_voice(run), run.parameters.backend)
    if policy.line not in (None, own):
        raise GateFailedError(
            f"policy {policy_name} promotes into line {policy.line}, but run {run_rid[:16]} trained voice "
            f"{run_voice(run) or BASE_VOICE!r} on {run.parameters.backend} (line {own}); pass that line's policy "
            "(`voxledger init` wrote one per corpus: plans-<corpus>/promote.yaml)"
        )
    return own


def policies_beside(plan_file: Path, line: str) -> list[Path]:
    """The promotion policies in a training plan's folder that promote into ``line`` (naming it, or
    naming no line): what a ``train`` hint offers for ``--policy``."""
    from voxledger.schemas.errors import VoxledgerError
    from voxledger.tasks.plans import load_plan

    found = []
    for path in sorted(plan_file.parent.glob("*.yaml")):
        try:
            policy = load_plan(path, PromotionPolicy)
        except VoxledgerError:
            continue  # another kind of plan (or not a valid policy): not offered
        if policy.line in (None, line):
            found.append(path)
    return found


def select_challengers(home: Home, run: TrainingRunReceipt, policy: PromotionPolicy) -> list[tuple[str, CheckpointReceipt]]:
    """Best-k epochs by CV loss plus the last epoch (deduplicated), as (receipt id, receipt)."""
    ids = [r.sha256 for r in run.inputs if r.role.startswith("checkpoint:")]
    ckpts = [(rid, home.receipts.read(rid, CheckpointReceipt)) for rid in ids]
    ranked = sorted(ckpts, key=lambda c: (c[1].parameters.cv_loss, c[1].parameters.epoch))
    chosen = ranked[: policy.best_k]
    if policy.include_last and ckpts[-1] not in chosen:
        chosen.append(ckpts[-1])
    return sorted(chosen, key=lambda c: c[1].parameters.epoch)


def round_control(template: GatePlan, challengers: int) -> str:
    """How a round of ``challengers`` controls its error, in words for the receipt."""
    c = template.statistics.confidence
    return (
        f"Bonferroni over the round's {challengers} challenger(s): intervals at {100 * round_confidence(c, challengers):.2f}% "
        f"per challenger, so one-sided false passes per round stay at or below {100 * (1 - c) / 2:.2f}% "
        f"and two-sided at or below {100 * (1 - c):.2f}%"
    )


def gate_plan_for(template: GatePlan, incumbent: Candidate, challengers: list[Candidate]) -> EvaluationPlan:
    """The gate plan's prompts, seeds, metrics and statistics with this round's candidates; the
    confidence is Bonferroni-adjusted over the challengers (``round_confidence``)."""
    st = template.statistics
    if len(challengers) > 1:
        st = st.model_copy(update={"confidence": round_confidence(st.confidence, len(challengers))})
    return EvaluationPlan(
        name=f"{template.name}:gate",
        prompts=template.prompts,
        seeds=template.seeds,
        candidates=(incumbent, *challengers),
        baseline=incumbent.name,
        speaker_references=template.speaker_references,
        metrics=template.metrics,
        statistics=st,
    )


def _paired_interval(rule: GateRule, c: Comparison) -> tuple[Interval | None, str]:
    """The interval a paired rule reads, and what it is called in a reason."""
    if rule.statistic in PAIRED_STATISTICS:
        return c.delta, f"{rule.statistic}({rule.metric})"
    if c.failures is None:
        return None, f"{rule.statistic}({rule.metric}) has no two-part comparison (only error rates such as wer:*, cer:* do)"
    if rule.statistic == "new_failure_rate_high":
        if c.failures.new_failures is None:
            return None, f"{rule.statistic}({rule.metric}): the gate evaluation predates the newly-failed-prompt interval; re-run it"
        return c.failures.new_failures, f"{rule.statistic}({rule.metric})"
    part = c.failures.rate_delta if rule.statistic == "failure_rate_delta_high" else c.failures.kept
    return part, f"{rule.statistic}({rule.metric})"


def judge(
    rule: GateRule,
    challenger: str,
    comparisons: dict[tuple[str, str], Comparison],
    means: dict[tuple[str, str], Interval],
    min_units: int = 1,
) -> RuleValue:
    """Evaluate one rule; a missing metric, or an interval that could not be estimated (too few
    compared prompts, no spread beyond round-off), fails the rule with the reason stated, whatever
    the rule reads (the mean delta too: a mean delta without an interval is not evidence). A
    ``challenger_mean`` fails when it rests on fewer than ``min_units`` prompts (a metric measured
    only on rows that passed the content gate can lose most of them)."""
    value: float | None = None
    reason = f"{rule.metric} was not measured for {challenger}"
    if rule.statistic == "challenger_mean":
        iv = means.get((challenger, rule.metric))
        if iv is not None and iv.units < min_units:
            reason = f"challenger_mean({rule.metric}) for {challenger} rests on {iv.units} prompt(s); the gate needs at least {min_units}"
        else:
            value = iv.mean if iv is not None else None
    else:
        c = comparisons.get((challenger, rule.metric))
        if c is not None:
            iv, label = _paired_interval(rule, c)
            if iv is None:
                reason = label
            elif iv.low is None or iv.high is None:
                reason = f"{label} for {challenger} is not estimable: {iv.note}"
            else:
                value = {"low": iv.low, "high": iv.high, "mean": iv.mean}[rule.statistic.rsplit("_", 1)[1]]
    if value is None:
        return RuleValue(**rule.model_dump(exclude={"why"}), value=None, passed=False, detail=reason)
    ok = value <= rule.threshold if rule.op == "<=" else value >= rule.threshold
    return RuleValue(
        **rule.model_dump(exclude={"why"}),
        value=value,
        passed=ok,
        detail=f"{rule.statistic}({rule.metric}) = {value:.4f} {'meets' if ok else 'fails'} {rule.op} {rule.threshold}",
    )


def _already_promoted(
    home: Home, run_rid: str, policy_sha: str, alias: str, champion: AliasState | None, line: str
) -> StageOutcome[PromotionReceipt] | None:
    """The promotion that made the current champion from this very run and policy, if it did.

    Re-running an unchanged pipeline must not re-judge a run against the champion it produced
    itself; that promotion's receipt is the answer (verified like any cache hit).
    """
    if champion is None:
        return None
    rid = promotion_that_moved(home.catalog, line, alias, champion.target_sha256, run_rid, policy_sha)
    if rid is None or rid != champion.receipt_sha256:
        return None
    return reuse(home, home.receipts.read(rid, PromotionReceipt).cache_key, PromotionReceipt)


@dataclass(frozen=True)
class RoundChallenger:
    """One challenger of a round: its checkpoint, its candidate in the gate plan, and the run (and,
    in a sweep, the member) it came from."""

    checkpoint_rid: str
    checkpoint: CheckpointReceipt
    candidate: Candidate
    run_rid: str
    member: str = ""


@dataclass(frozen=True)
class PromotionRound:
    """One promotion round, prepared: the runs, the policy, the incumbent, the challengers and the
    gate plan to evaluate them on; what a decision judges once the gate evaluation ran.

    A run's round (``prepare_promotion``, judged by ``decide_promotion``) has one unnamed run; a
    sweep's (``sweep/gate.py``: ``prepare_sweep_gate``, ``decide_sweep_gate``) one run per member,
    named, and the challengers of all of them."""

    runs: tuple[tuple[str, str], ...]  # (member name, training run id); ('', id) in a run's own round
    policy: PromotionPolicy
    policy_rid: str
    policy_sha: str
    base_sha: str | None
    line: str
    champion: AliasState | None
    challengers: tuple[RoundChallenger, ...]
    incumbent: Candidate
    incumbent_sha: str
    bindings: dict[str, str]
    key: str
    gate: EvaluationPlan
    gate_name: str
    started: datetime

    @property
    def training_run_rid(self) -> str:
        """The run a run's own round judges (a sweep's first member's for a sweep)."""
        return self.runs[0][1]

    def gate_parents(self) -> tuple[InputRef, ...]:
        """What the gate evaluation records as its parent: the policy it was derived from."""
        return (InputRef(role="policy", sha256=self.policy_rid, ref="receipt"),)


def prepare_promotion(
    home: Home,
    training_run_rid: str,
    policy: PromotionPolicy,
    *,
    policy_name: str,
    flow: str = "promote_adapter",
    progress: Callable[[str], None] | None = None,
) -> PromotionRound | StageOutcome[PromotionReceipt]:
    """The round to judge, or the stored promotion when this exact round was judged before (verified).

    Raises PlanError before any work when a rule names a metric the registry does not know.
    """
    from voxledger.schemas.errors import ReceiptError, TrainingError

    check_plan(policy, f"promotion policy {policy_name}")
    started = utc_now()
    try:
        run = home.receipts.read(training_run_rid, TrainingRunReceipt)
    except ReceiptError as exc:
        raise TrainingError(f"{exc}; pass the id `voxledger train` printed") from exc
    policy_rid, policy_sha = register_plan(home, policy, source_name=policy_name, flow=flow)
    base_sha = run.parameters.bound.base_sha256
    line = line_of(run, training_run_rid, policy, policy_name)
    champion = alias_state(home, line, policy.alias)
    if champion is not None and champion.base_sha256 != base_sha:
        raise GateFailedError(
            f"alias {line}:{policy.alias} serves on base {champion.base_sha256}, but run {training_run_rid} was trained on base "
            f"{base_sha}; an adapter can only replace a champion of the same base model"
        )
    backend = run.parameters.backend
    challengers = select_challengers(home, run, policy)
    speaker = str(run.parameters.effective_config["plan"].get("new_speaker") or policy.baseline_speaker)  # type: ignore[union-attr]
    base_ref = "input:base" if base_sha else OWN_BASE  # no stored base: the backend's own (cosyvoice3's model folder)
    cands = [
        Candidate(
            name=f"epoch{c.parameters.epoch}",
            backend=backend,
            runtime="adapter",
            artifact=f"input:epoch{c.parameters.epoch}",
            base=base_ref,
            speaker=speaker,
        )
        for _, c in challengers
    ]
    bindings = {f"epoch{c.parameters.epoch}": c.subject("checkpoint").sha256 for _, c in challengers}
    if base_sha:
        bindings["base"] = base_sha
    if champion is None and base_sha:
        incumbent = Candidate(name="incumbent", backend=backend, runtime="base", artifact="input:base", speaker=policy.baseline_speaker)
        incumbent_sha = base_sha
    elif champion is None:
        # the backend's own base speaks from the voice prompt the adapters bundle (zero-shot in the target voice):
        # the first challenger's tree supplies that prompt, its adapter is not loaded (runtime base)
        bindings["incumbent"] = incumbent_sha = challengers[0][1].subject("checkpoint").sha256
        incumbent = Candidate(name="incumbent", backend=backend, runtime="base", artifact="input:incumbent", speaker=speaker)
    else:
        incumbent = Candidate(
            name="incumbent", backend=backend, runtime="adapter", artifact="input:incumbent", base=base_ref, speaker=speaker
        )
        bindings["incumbent"] = incumbent_sha = champion.target_sha256
    key = cache_key("promote", {"run": training_run_rid, **bindings}, policy_sha, {})
    hit = reuse(home, key, PromotionReceipt, report=progress) or _already_promoted(
        home, training_run_rid, policy_sha, policy.alias, champion, line
    )
    if hit is not None:
        return hit
    gate = gate_plan_for(policy.gate_plan, incumbent, cands)
    # a derived plan: named by its digest (each round's candidates differ; the policy file is what is frozen)
    gate_name = f"{policy_name}#gate@{plan_digest(gate)[:16]}"
    return PromotionRound(
        runs=(("", training_run_rid),),
        policy=policy,
        policy_rid=policy_rid,
        policy_sha=policy_sha,
        base_sha=base_sha,
        line=line,
        champion=champion,
        challengers=tuple(RoundChallenger(rid, ck, cand, training_run_rid) for (rid, ck), cand in zip(challengers, cands, strict=True)),
        incumbent=incumbent,
        incumbent_sha=incumbent_sha,
        bindings=bindings,
        key=key,
        gate=gate,
        gate_name=gate_name,
        started=started,
    )


def promote_adapter_fn(
    home: Home,
    training_run_rid: str,
    policy: PromotionPolicy,
    *,
    policy_name: str,
    corpus: Path,
    flow: str = "promote_adapter",
    progress: Callable[[str], None] | None = None,
) -> StageOutcome[PromotionReceipt]:
    """Evaluate best-k + last against the champion (or the base model) and move aliases: the three
    steps (``prepare_promotion``, the gate evaluation, ``decide_promotion``) in one call. The
    ``promote`` flow runs the same steps as separate Prefect tasks."""
    prepared = prepare_promotion(home, training_run_rid, policy, policy_name=policy_name, flow=flow, progress=progress)
    if isinstance(prepared, StageOutcome):
        return prepared
    return decide_promotion(home, prepared, evaluate_gate(home, prepared, corpus, flow=flow, progress=progress), flow=flow)


def evaluate_gate(
    home: Home, prepared: PromotionRound, corpus: Path, *, flow: str, progress: Callable[[str], None] | None = None
) -> StageOutcome[EvaluationReceipt]:
    """The gate evaluation of a prepared round (a run's or a sweep's), run once for every challenger."""
    return evaluate_plan_fn(
        home,
        prepared.gate,
        plan_name=prepared.gate_name,
        corpus=corpus,
        bindings=prepared.bindings,
        flow=flow,
        progress=progress,
        parents=prepared.gate_parents(),
    )


def _power_warning(home: Home, policy: PromotionPolicy, evaluation_rid: str) -> str | None:
    """The policy's power at the effects and spread this gate evaluation measured, flagged under 50%."""
    from voxledger.schemas.errors import EvaluationError

    try:
        warning = power_warning(policy_power(home, policy, evaluation_rid))
    except EvaluationError:
        return None
    return None if warning is None else f"at the effects this gate measured, {warning}"


def decide_promotion(
    home: Home, rnd: PromotionRound, ev: StageOutcome[EvaluationReceipt], *, flow: str = "promote_adapter"
) -> StageOutcome[PromotionReceipt]:
    """Judge every challenger on the gate evaluation, move aliases, record the promotion receipt."""
    policy, champion, base_sha, incumbent = rnd.policy, rnd.champion, rnd.base_sha, rnd.incumbent
    training_run_rid, policy_rid = rnd.training_run_rid, rnd.policy_rid
    comparisons = {(c.candidate, c.metric): c for c in ev.receipt.result.comparisons}
    means = {(s.candidate, m): iv for s in ev.receipt.result.summaries for m, iv in s.overall.items()}
    decisions = []
    # the method's minimum, or every gate prompt when the policy has fewer (a challenger_mean-only policy)
    need = min(policy.gate_plan.statistics.min_units(), len(policy.gate_plan.prompts))
    for c in rnd.challengers:
        ck = c.checkpoint
        rules = tuple(judge(r, c.candidate.name, comparisons, means, need) for r in policy.rules)
        decisions.append(
            ChallengerDecision(
                name=c.candidate.name,
                checkpoint_receipt=c.checkpoint_rid,
                tree_sha256=ck.subject("checkpoint").sha256,
                epoch=ck.parameters.epoch,
                cv_loss=ck.parameters.cv_loss,
                rules=rules,
                passed=all(r.passed for r in rules),
            )
        )
    passing = sorted((d for d in decisions if d.passed), key=lambda d: (d.cv_loss, d.epoch))
    best_cv = min(decisions, key=lambda d: (d.cv_loss, d.epoch))
    previous_candidate = alias_state(home, rnd.line, policy.candidate_alias)
    promoted = passing[0] if passing else None
    moves = [
        m
        for m in (
            _move(policy.candidate_alias, previous_candidate, best_cv.tree_sha256, base_sha,
                  f"lowest CV loss of run {training_run_rid[:12]} ({best_cv.name}, {best_cv.cv_loss:.4f})"),
            _move(policy.alias, champion, promoted.tree_sha256, base_sha,
                  f"{promoted.name} passed all {len(policy.rules)} gates against {incumbent.runtime} incumbent")
            if promoted is not None
            else None,
        )
        if m is not None
    ]  # fmt: skip
    failed = "; ".join(f"{d.name}: " + ", ".join(r.detail for r in d.rules if not r.passed) for d in decisions if not d.passed)
    receipt = build_receipt(
        PromotionReceipt,
        flow=flow,
        task="decide_promotion",
        started_at=rnd.started,
        key=rnd.key,
        status="succeeded" if promoted else "failed",
        error=None if promoted else f"no challenger passed every gate: {failed}",
        inputs=[
            InputRef(role="training_run", sha256=training_run_rid, ref="receipt"),
            InputRef(role="policy", sha256=policy_rid, ref="receipt"),
            InputRef(role="evaluation", sha256=ev.receipt_id, ref="receipt"),
            *(InputRef(role=f"challenger:{d.name}", sha256=d.checkpoint_receipt, ref="receipt") for d in decisions),
        ],
        parameters=PromotionParameters(
            policy_sha256=rnd.policy_sha,
            training_run=training_run_rid,
            evaluation=ev.receipt_id,
            incumbent=incumbent.runtime,
            incumbent_sha256=rnd.incumbent_sha or ("0" * 64),
            serving_base_sha256=base_sha,
            line=rnd.line,
        ),
        result=PromotionResult(
            challengers=tuple(decisions),
            promoted=promoted.name if promoted else None,
            moves=tuple(moves),
            error_control=round_control(policy.gate_plan, len(decisions)),
            power_warning=_power_warning(home, policy, ev.receipt_id),
        ),
    )
    return record(home, receipt)


def _move(alias: str, current: AliasState | None, target: str, base_sha: str | None, reason: str) -> AliasMove | None:
    """The move of ``alias`` to ``target``, or None when it already points there (a no-op move is not history)."""
    if current is not None and current.target_sha256 == target:
        return None
    return AliasMove(
        alias=alias,
        target_sha256=target,
        previous_sha256=current.target_sha256 if current is not None else None,
        base_sha256=base_sha,
        reason=reason,
    )


# The stage contract (tasks/stages/contract.py).
run = promote_adapter_fn


def inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and the adapter training run's receipt."""
    return {"corpus": ctx.corpus, "run_rid": ctx.rid("train_adapter")}


def best_challenger(result: PromotionResult) -> ChallengerDecision | None:
    """The challenger closest to passing: the most rules passed, then the lowest CV loss."""
    if not result.challengers:
        return None
    return min(result.challengers, key=lambda d: (-sum(r.passed for r in d.rules), d.cv_loss, d.epoch))


def failure_hint(rid: str, receipt: PromotionReceipt) -> str:
    """What a failed gate says: one short line per fact (the best challenger, each rule it failed) and
    one per complete next command, so no line is long enough to be cut by the error boundary."""
    best = best_challenger(receipt.result)
    lines = [f"no challenger passed every gate (promotion receipt {rid[:16]}, {len(receipt.result.challengers)} challenger(s))"]
    if best is not None:
        failed = [r for r in best.rules if not r.passed]
        lines.append(
            f"closest: {best.name} (tree {best.tree_sha256[:16]}, CV loss {best.cv_loss:.4f}) failed {len(failed)} of {len(best.rules)} rule(s):"
        )
        lines += [f"  {r.detail[:240]}" for r in failed]
    base = receipt.parameters.serving_base_sha256
    lines.append(f"next: voxledger receipt show {rid[:16]}   (every challenger's rule values)")
    if best is not None:
        lines.append(
            f"next: voxledger eval run EVAL_PLAN --corpus CORPUS --bind base={base[:16] if base else 'BASE'} "
            f"--bind adapter={best.tree_sha256[:16]}   (listen to it; docs/own-corpus.md)"
        )
    lines.append("or train longer or on more clips and run the pipeline again")
    return "\n".join(lines)


def verdict(out: StageOutcome[PromotionReceipt]) -> None:
    """Raise GateFailedError (naming the receipt and the challenger closest to passing) unless a challenger was promoted."""
    from voxledger.schemas.errors import GateFailedError

    if out.receipt.result.promoted is None:
        raise GateFailedError(failure_hint(out.receipt_id, out.receipt), receipt_id=out.receipt_id)


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``promote`` flow's arguments: the corpus (checked against the run's audit), the training run and the policy."""
    from voxledger.schemas.audit import AuditReceipt
    from voxledger.tasks.stages.reproduce import check_corpus, plan_ref

    r = cast(PromotionReceipt, prep.receipt)
    run = home.receipts.read(r.parameters.training_run, TrainingRunReceipt)
    check_corpus(home, home.receipts.read(run.parameters.bound.audit_receipt, AuditReceipt), need_corpus(corpus, prep))
    return {"corpus": str(corpus), "run_rid": r.parameters.training_run, "plan": plan_ref(home, r, "policy")}


def compare(h: Home, s: Home, original: PromotionReceipt, rerun: PromotionReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """The decision and its claims, each gate evaluation read from its own home."""
    from voxledger.tasks.reproduction import compare as cmp

    gate = (
        h.receipts.read(original.parameters.evaluation, EvaluationReceipt),
        s.receipts.read(rerun.parameters.evaluation, EvaluationReceipt),
    )
    return cmp.compare_promotion(original, rerun, cmp.read_either(h, s), gate, bands)


def summary(receipt: PromotionReceipt) -> str:
    """Which challenger was promoted against what, with each rule's value for it."""
    r = receipt.result
    if r.promoted is None:
        return f"no challenger passed ({len(r.challengers)} judged against the {receipt.parameters.incumbent} incumbent)"
    won = next(c for c in r.challengers if c.name == r.promoted)
    rules = "; ".join(
        f"{v.statistic}({v.metric}) = {'n/a' if v.value is None else f'{v.value:.3f}'} {v.op} {v.threshold:g}" for v in won.rules
    )
    return f"{r.promoted} promoted over the {receipt.parameters.incumbent} incumbent ({len(r.challengers)} challengers): {rules}"
