"""One gate for a whole sweep: every member's challengers against one incumbent, in one decision.

The promotion stage judges one run's best-k + last checkpoints; a sweep that judged each member
that way would run one family per member and so let the chance of a false promotion grow with the
number of members. Here the challengers of every member (each member's best-k + last, chosen by
the policy exactly as the promotion stage chooses them: ``select_challengers``) are candidates of
ONE gate evaluation (same prompts, seeds and incumbent), whose intervals are Bonferroni-adjusted
over all of them (``gate_plan_for``), each judged by the policy's rules (``judge``). At most one
challenger is promoted: the lowest CV loss among those that pass every rule. The decision is an
ordinary ``promotion`` receipt (its ``training_run`` the winner's member, else the member of the
lowest-CV challenger, which the candidate alias moves to), so aliases, lineage and provenance treat
it like any promotion; its inputs name every member's run, and ``error_control`` states the family.
"""

from __future__ import annotations

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.errors import GateFailedError
from voxledger.schemas.evaluation import OWN_BASE, Candidate, EvaluationReceipt
from voxledger.schemas.promotion import (
    AliasMove,
    ChallengerDecision,
    PromotionParameters,
    PromotionPolicy,
    PromotionReceipt,
    PromotionResult,
)
from voxledger.schemas.sweep import SweepFamily
from voxledger.schemas.training import BackendName, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.tasks.plans import check_plan, plan_digest, register_plan
from voxledger.tasks.power import round_confidence
from voxledger.tasks.receipting import build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, record, reuse
from voxledger.tasks.stages.promote import (
    AliasState,
    PromotionRound,
    RoundChallenger,
    alias_state,
    gate_plan_for,
    judge,
    line_of,
    run_voice,
    select_challengers,
)

MEMBER_ROLE = "sweep_member:"
"""The input role prefix naming each member's training run in the sweep's promotion receipt."""


def prepare_sweep_gate(
    home: Home, members: list[tuple[str, str]], policy: PromotionPolicy, *, policy_name: str, flow: str = "sweep"
) -> PromotionRound | StageOutcome[PromotionReceipt]:
    """The round over ``members`` ((name, training run id) pairs), or the stored decision of this very round.

    Raises:
        PlanError: a rule names a metric the registry does not know.
        GateFailedError: members trained on different bases or lines, or a champion on another base.
    """
    check_plan(policy, f"promotion policy {policy_name}")
    started = utc_now()
    policy_rid, policy_sha = register_plan(home, policy, source_name=policy_name, flow=flow)
    runs = [(name, rid, home.receipts.read(rid, TrainingRunReceipt)) for name, rid in members]
    bases = {r.parameters.bound.base_sha256 for _, _, r in runs}
    lines = {line_of(r, rid, policy, policy_name) for _, rid, r in runs}
    if len(bases) != 1 or len(lines) != 1:
        raise GateFailedError(
            f"sweep members must share one base and one model line; they name bases {sorted(map(str, bases))} and lines {sorted(lines)}"
        )
    base_sha, line = bases.pop(), lines.pop()
    champion = alias_state(home, line, policy.alias)
    if champion is not None and champion.base_sha256 != base_sha:
        raise GateFailedError(
            f"alias {line}:{policy.alias} serves on base {champion.base_sha256}, but the sweep trained on base {base_sha}"
        )
    base_ref = "input:base" if base_sha else OWN_BASE
    speaker = run_voice(runs[0][2]) or policy.baseline_speaker
    challengers = []
    for name, rid, run in runs:
        for ck_rid, ck in select_challengers(home, run, policy):
            cname = f"{name}-epoch{ck.parameters.epoch}"
            cand = Candidate(
                name=cname, backend=run.parameters.backend, runtime="adapter", artifact=f"input:{cname}", base=base_ref, speaker=speaker
            )
            challengers.append(RoundChallenger(ck_rid, ck, cand, rid, member=name))
    bindings = {c.candidate.name: c.checkpoint.subject("checkpoint").sha256 for c in challengers}
    incumbent, incumbent_sha = _incumbent(runs[0][2].parameters.backend, champion, base_sha, speaker, policy, challengers, bindings)
    key = cache_key("sweep_gate", {"runs": [rid for _, rid in members], **bindings}, policy_sha, {})
    hit = reuse(home, key, PromotionReceipt) or _already_promoted(home, members, policy_sha, champion)
    if hit is not None:
        return hit
    gate = gate_plan_for(policy.gate_plan, incumbent, [c.candidate for c in challengers])
    return PromotionRound(
        runs=tuple(members), policy=policy, policy_rid=policy_rid, policy_sha=policy_sha, base_sha=base_sha, line=line,
        champion=champion, challengers=tuple(challengers), incumbent=incumbent, incumbent_sha=incumbent_sha, bindings=bindings,
        key=key, gate=gate, gate_name=f"{policy_name}#sweep-gate@{plan_digest(gate)[:16]}", started=started,
    )  # fmt: skip


def _incumbent(
    backend: BackendName, champion: AliasState | None, base_sha: str | None, speaker: str, policy: PromotionPolicy,
    challengers: list[RoundChallenger], bindings: dict[str, str],
) -> tuple[Candidate, str]:  # fmt: skip
    """The incumbent the promotion stage would judge against (the champion, else the base), its binding added."""
    if base_sha:
        bindings["base"] = base_sha
    if champion is not None:
        bindings["incumbent"] = champion.target_sha256
        base_ref = "input:base" if base_sha else OWN_BASE
        return Candidate(
            name="incumbent", backend=backend, runtime="adapter", artifact="input:incumbent", base=base_ref, speaker=speaker
        ), champion.target_sha256
    if base_sha:
        return Candidate(
            name="incumbent", backend=backend, runtime="base", artifact="input:base", speaker=policy.baseline_speaker
        ), base_sha
    # the backend's own base speaks from the voice prompt the adapters bundle (see prepare_promotion)
    bindings["incumbent"] = sha = challengers[0].checkpoint.subject("checkpoint").sha256
    return Candidate(name="incumbent", backend=backend, runtime="base", artifact="input:incumbent", speaker=speaker), sha


def _already_promoted(
    home: Home, members: list[tuple[str, str]], policy_sha: str, champion: AliasState | None
) -> StageOutcome[PromotionReceipt] | None:
    """The sweep decision that made the current champion from these very members under this policy:
    a re-run must not judge the sweep against the champion it produced itself."""
    if champion is None:
        return None
    made = home.receipts.read(champion.receipt_sha256, PromotionReceipt)
    judged = {i.sha256 for i in made.inputs if i.role.startswith(MEMBER_ROLE)}
    if made.parameters.policy_sha256 != policy_sha or judged != {rid for _, rid in members}:
        return None
    return reuse(home, made.cache_key, PromotionReceipt)


def member_of(challenger: str) -> str:
    """The member a sweep challenger (``<member>-epoch<N>``) belongs to (member names hold no ``-``)."""
    return challenger.rsplit("-epoch", 1)[0]


def sweep_family(members: int, challengers: int, policy: PromotionPolicy) -> SweepFamily:
    """The family the decision controls: members x challengers x rules, Bonferroni over the challengers."""
    c = policy.gate_plan.statistics.confidence
    return SweepFamily(
        members=members,
        challengers=challengers,
        rules=len(policy.rules),
        method="bonferroni",
        per_challenger_confidence=round_confidence(c, challengers),
        familywise_one_sided=(1 - c) / 2,
    )


def family_text(f: SweepFamily) -> str:
    """The family in words, for the promotion receipt's ``error_control``."""
    return (
        f"one gate over a sweep of {f.members} members: {f.challengers} challengers x {f.rules} rule(s) (a challenger passes only "
        f"on every rule, so no adjustment over rules); Bonferroni over the {f.challengers} challengers: intervals at "
        f"{100 * f.per_challenger_confidence:.3f}% per challenger, so one-sided false passes of the whole sweep stay at or below "
        f"{100 * f.familywise_one_sided:.2f}% and two-sided at or below {200 * f.familywise_one_sided:.2f}%; at most one winner"
    )


def decide_sweep_gate(
    home: Home, rnd: PromotionRound, ev: StageOutcome[EvaluationReceipt], *, flow: str = "sweep"
) -> StageOutcome[PromotionReceipt]:
    """Judge every challenger of every member on the one gate evaluation; promote at most one; record the decision."""
    policy = rnd.policy
    comparisons = {(c.candidate, c.metric): c for c in ev.receipt.result.comparisons}
    means = {(s.candidate, m): iv for s in ev.receipt.result.summaries for m, iv in s.overall.items()}
    need = min(policy.gate_plan.statistics.min_units(), len(policy.gate_plan.prompts))
    decisions, run_of = [], {}
    for c in rnd.challengers:
        rules = tuple(judge(r, c.candidate.name, comparisons, means, need) for r in policy.rules)
        ck = c.checkpoint.parameters
        d = ChallengerDecision(name=c.candidate.name, checkpoint_receipt=c.checkpoint_rid, tree_sha256=rnd.bindings[c.candidate.name],
                               epoch=ck.epoch, cv_loss=ck.cv_loss, rules=rules, passed=all(r.passed for r in rules))  # fmt: skip
        decisions.append(d)
        run_of[d.name] = c.run_rid
    passing = sorted((d for d in decisions if d.passed), key=lambda d: (d.cv_loss, d.epoch))
    best_cv = min(decisions, key=lambda d: (d.cv_loss, d.epoch))
    promoted = passing[0] if passing else None
    judged_run = run_of[(promoted or best_cv).name]
    moves = [
        m
        for m in (
            _move(policy.candidate_alias, alias_state(home, rnd.line, policy.candidate_alias), best_cv, rnd.base_sha, "lowest CV loss of the sweep"),
            _move(policy.alias, rnd.champion, promoted, rnd.base_sha, f"passed all {len(policy.rules)} gates, lowest CV loss of the sweep's passing challengers") if promoted else None,
        )
        if m is not None
    ]  # fmt: skip
    failed = f"none of the sweep's {len(decisions)} challengers passed every gate"
    receipt = build_receipt(
        PromotionReceipt,
        flow=flow,
        task="decide_sweep_gate",
        started_at=rnd.started,
        key=rnd.key,
        status="succeeded" if promoted else "failed",
        error=None if promoted else failed,
        inputs=[
            InputRef(role="training_run", sha256=judged_run, ref="receipt"),
            InputRef(role="policy", sha256=rnd.policy_rid, ref="receipt"),
            InputRef(role="evaluation", sha256=ev.receipt_id, ref="receipt"),
            *(InputRef(role=f"{MEMBER_ROLE}{name}", sha256=rid, ref="receipt") for name, rid in rnd.runs),
            *(InputRef(role=f"challenger:{d.name}", sha256=d.checkpoint_receipt, ref="receipt") for d in decisions),
        ],
        parameters=PromotionParameters(
            policy_sha256=rnd.policy_sha,
            training_run=judged_run,
            evaluation=ev.receipt_id,
            incumbent=rnd.incumbent.runtime,
            incumbent_sha256=rnd.incumbent_sha or ("0" * 64),
            serving_base_sha256=rnd.base_sha,
            line=rnd.line,
        ),  # fmt: skip
        result=PromotionResult(
            challengers=tuple(decisions),
            promoted=promoted.name if promoted else None,
            moves=tuple(moves),
            error_control=family_text(sweep_family(len(rnd.runs), len(decisions), policy)),
        ),
    )
    return record(home, receipt)


def _move(alias: str, current: AliasState | None, to: ChallengerDecision, base_sha: str | None, why: str) -> AliasMove | None:
    """The move of ``alias`` to ``to``'s tree, or None when it already points there."""
    if current is not None and current.target_sha256 == to.tree_sha256:
        return None
    prev = current.target_sha256 if current is not None else None
    return AliasMove(alias=alias, target_sha256=to.tree_sha256, previous_sha256=prev, base_sha256=base_sha, reason=f"{to.name}: {why}")
