"""Power of a promotion policy's paired rules, from a pilot (or earlier) evaluation.

For each rule that compares challenger and incumbent, the pilot's per-prompt deltas give the
assumed true effect (their mean) and the spread between prompts; when the pilot had two or more
seeds per prompt, the spread is split into a prompt part and a seed part, so more seeds can be
weighed against more prompts. Power is the chance the rule passes on a fresh gate evaluation of
``prompts`` x ``seeds`` with the round's per-challenger confidence (``round_confidence``):

- ``delta_high <= m`` passes when the upper end of the t interval is at most m: with prompt
  deltas N(mu, sigma^2), (m - mean) / se follows a noncentral t with k - 1 degrees of freedom and
  noncentrality (m - mu) sqrt(k) / sigma, so power = P(T >= t_(1 - a/2)) (``scipy.stats.nct``);
  ``delta_low >= m`` mirrors it; ``delta_mean`` compares the mean alone (normal approximation);
  the ``kept_delta_*`` rules use the deltas of the prompts neither side failed.
- ``new_failure_rate_high <= m`` passes when the Clopper-Pearson upper end of the newly failed
  share is at most m: its power is exact (binomial) at the pilot's newly failed share.
- ``failure_rate_delta_high`` and ``challenger_mean`` rules are not assessed here (noted).

Every rule is assessed twice: on the pilot as measured, and on the pilot with catastrophic prompts
(``catastrophic.CATASTROPHIC_RATE`` of prompts failing, +0.8 WER): a delta rule by simulating the
mixture through the t interval, a kept-prompt rule at the prompts left, the failure rule at the
raised share. When the pilot has several model candidates (adapter and merged, say) the less
favourable one at the policy's design is taken, and the note says which and what the others gave.

The normal model is what the t interval itself assumes; the bench (``voxledger bench --only
stats``) checks the recommended prompt count by simulation.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.evaluation import EvaluationReceipt, Observation
from voxledger.schemas.promotion import GateRule, PromotionPolicy
from voxledger.stores.home import Home
from voxledger.tasks.evaluation.catastrophic import (
    CATASTROPHIC_EXCESS,
    CATASTROPHIC_RATE,
    challengers_of,
    failure_pass_probability,
)

TARGET_POWER = 0.8
FLAG_POWER = 0.5
MAX_PROMPTS = 5000


def round_confidence(confidence: float, challengers: int) -> float:
    """Per-challenger confidence that holds the round's error at ``1 - confidence`` (Bonferroni).

    A round promotes if any challenger passes, so its false-pass rate is at most the sum over
    challengers; each challenger's intervals are therefore computed at ``1 - (1 - confidence) / m``.
    """
    return 1 - (1 - confidence) / max(1, challengers)


@dataclass(frozen=True)
class PilotDeltas:
    """Per-prompt mean deltas of one candidate against the pilot's baseline on one metric."""

    candidate: str
    metric: str
    deltas: np.ndarray
    seeds: int
    seed_var: float | None  # within-prompt variance of one seed's delta, when seeds >= 2
    new_failure_rate: float = 0.0  # share of paired prompts this candidate failed and the baseline did not


@dataclass(frozen=True)
class RulePower:
    """The power of one rule at the policy's design, and the prompts it needs for the target.

    ``pilot`` says which data: the pilot as measured, or with catastrophic prompts. For
    ``new_failure_rate_high`` ``effect`` is the newly failed share assumed, and ``sd`` is None."""

    rule: str
    candidate: str | None
    effect: float | None
    sd_prompt_mean: float | None
    prompts: int
    seeds: int
    confidence: float
    power: float | None
    prompts_needed: int | None
    prompts_needed_by_seeds: dict[int, int | None]
    note: str | None = None
    pilot: str = "as measured"


def rule_label(rule: GateRule) -> str:
    """``delta_high(wer:whisper_en) <= 0.15``."""
    return f"{rule.statistic}({rule.metric}) {rule.op} {rule.threshold:g}"


def power_of(statistic: str, op: str, threshold: float, effect: float, sd: float, k: int, confidence: float) -> float:
    """Chance that ``statistic op threshold`` passes with k prompt deltas ~ N(effect, sd^2)."""
    if k < 2 or sd <= 0:
        return float("nan")
    shift = (threshold - effect) if op == "<=" else (effect - threshold)
    ncp = shift * math.sqrt(k) / sd
    from scipy import stats  # ~0.8 s of imports: here, not in every promotion (a cached one needs none)

    if statistic.endswith("_mean"):
        return float(stats.norm.cdf(ncp))
    q = float(stats.t.ppf(0.5 + confidence / 2, k - 1))
    return float(stats.nct.sf(q, k - 1, ncp))


def prompts_needed(statistic: str, op: str, threshold: float, effect: float, sd: float, confidence: float, target: float) -> int | None:
    """Fewest prompts (at least 5) reaching ``target`` power; None when none up to ``MAX_PROMPTS`` does."""
    if power_of(statistic, op, threshold, effect, sd, MAX_PROMPTS, confidence) < target:
        return None
    lo, hi = 5, MAX_PROMPTS
    if power_of(statistic, op, threshold, effect, sd, lo, confidence) >= target:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power_of(statistic, op, threshold, effect, sd, mid, confidence) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def pilot_deltas(home: Home, receipt_id: str, metric: str, kept: bool, threshold: float, failure_rule: str = "level") -> list[PilotDeltas]:
    """Per-prompt deltas of every model candidate of the pilot on ``metric`` (not the baseline, not
    the recordings).

    ``kept``: only prompts neither side failed (two-part rules): under ``failure_rule`` ``level`` a
    side fails a prompt whose mean reaches ``threshold``, under ``increase`` one whose mean exceeds
    the other side's by ``threshold`` (``StatisticsSettings``).

    Raises:
        EvaluationError: the pilot never measured ``metric``.
    """
    receipt = home.receipts.read(receipt_id, EvaluationReceipt)
    sha = next(a.sha256 for a in receipt.subjects if a.role == "observations")
    obs = [Observation.model_validate(o) for o in json.loads(home.blobs.get_bytes(sha))]
    by: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
    for o in obs:
        if o.metric == metric:
            by[o.candidate][(o.prompt_id, o.seed)] = o.value
    baselines = {c.baseline for c in receipt.result.comparisons}
    if not by or not baselines:
        raise EvaluationError(f"pilot evaluation {receipt_id[:12]} has no paired comparison on {metric!r}; pick a pilot that measured it")
    base = by.get(next(iter(baselines)), {})
    # the recordings are a reference no gate promotes: their delta says nothing of a challenger's
    references = {c.name for c in receipt.parameters.candidates if c.runtime == "recordings"}
    out = []
    for cand, values in sorted(by.items()):
        if cand in baselines or cand in references:
            continue
        per: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        for (prompt, seed), v in values.items():
            if (prompt, seed) in base:
                per[prompt].append((v - base[(prompt, seed)], v, base[(prompt, seed)]))
        fails = {
            p: _failed(float(np.mean([x[1] for x in r])), float(np.mean([x[2] for x in r])), threshold, failure_rule)
            for p, r in per.items()
        }
        newly = [c and not b for c, b in fails.values()]
        new_rate = float(np.mean(newly)) if newly else 0.0
        if kept:
            per = {p: r for p, r in per.items() if not any(fails[p])}
        if len(per) < 2:
            continue
        deltas = np.array([np.mean([x[0] for x in r]) for r in per.values()])
        seeds = int(round(np.mean([len(r) for r in per.values()])))
        within = [np.var([x[0] for x in r], ddof=1) for r in per.values() if len(r) >= 2]
        out.append(PilotDeltas(cand, metric, deltas, seeds, float(np.mean(within)) if within else None, new_rate))
    return out


def _failed(challenger: float, baseline: float, threshold: float, rule: str) -> tuple[bool, bool]:
    """(challenger failed the prompt, baseline failed it), as ``failure_split`` counts them."""
    if rule == "increase":
        return challenger - baseline >= threshold, baseline - challenger >= threshold
    return challenger >= threshold, baseline >= threshold


def _sd_at(pilot: PilotDeltas, seeds: int) -> float:
    """SD of a prompt's mean delta with ``seeds`` seeds (prompt part + seed part / seeds)."""
    total = float(np.var(pilot.deltas, ddof=1))
    if pilot.seed_var is None:
        return math.sqrt(total)
    between = max(0.0, total - pilot.seed_var / pilot.seeds)
    return math.sqrt(between + pilot.seed_var / seeds)


def policy_power(home: Home, policy: PromotionPolicy, pilot_receipt: str, target: float = TARGET_POWER) -> list[RulePower]:
    """Power of every paired rule of ``policy`` at its gate design, from the pilot's model candidates
    (``rule_power``), as measured and with catastrophic prompts.

    The round's confidence per challenger is Bonferroni over the policy's challengers (``best_k``,
    +1 with ``include_last``), as the promotion itself computes it.
    """
    gate = policy.gate_plan
    conf = round_confidence(gate.statistics.confidence, challengers_of(policy))
    out = []
    for rule in policy.rules:
        pilots: list[PilotDeltas] = []
        if rule.statistic not in UNASSESSED:
            kept = rule.statistic.startswith("kept_")
            pilots = pilot_deltas(home, pilot_receipt, rule.metric, kept, gate.statistics.failure_threshold, gate.statistics.failure_rule)
        out += rule_power(rule, pilots, len(gate.prompts), len(gate.seeds), conf, target)
    return out


UNASSESSED = frozenset({"challenger_mean", "failure_rate_delta_high"})


def rule_power(rule: GateRule, pilots: list[PilotDeltas], k: int, seeds: int, conf: float, target: float = TARGET_POWER) -> list[RulePower]:
    """One rule's power on the pilot as measured and on the pilot with catastrophic prompts, from
    the less favourable of ``pilots`` (the note names it and what the others gave)."""
    label = rule_label(rule)
    if rule.statistic in UNASSESSED:
        return [
            RulePower(
                label, None, None, None, k, seeds, conf, None, None, {}, "not assessed: power is computed for rules on a paired delta"
            )
        ]
    if not pilots:
        return [RulePower(label, None, None, None, k, seeds, conf, None, None, {}, "the pilot has fewer than 2 paired prompts")]
    rows = []
    for q, pilot in ((0.0, "as measured"), (CATASTROPHIC_RATE, f"with {100 * CATASTROPHIC_RATE:g}% catastrophic prompts")):
        powers = {p.candidate: _power(rule, p, k, seeds, conf, q) for p in pilots}
        worst = min(pilots, key=lambda p: powers[p.candidate])
        note = None
        if len(pilots) > 1:
            shown = ", ".join(f"{c} {100 * v:.0f}%" for c, v in powers.items())
            note = f"the less favourable of {len(pilots)} model candidates ({shown})"
        rows.append(_row(rule, label, worst, k, seeds, conf, q, target, powers[worst.candidate], note, pilot))
    return rows


def _power(rule: GateRule, p: PilotDeltas, k: int, seeds: int, conf: float, q: float) -> float:
    """Chance ``rule`` passes a challenger like pilot ``p`` with a share ``q`` of catastrophic prompts."""
    if rule.statistic == "new_failure_rate_high":
        rate = p.new_failure_rate + q * (1 - p.new_failure_rate)
        return failure_pass_probability(rate, k, (1 - conf) / 2, rule.threshold)
    statistic, effect, sd = rule.statistic.removeprefix("kept_"), float(p.deltas.mean()), _sd_at(p, seeds)
    if q == 0:
        return power_of(statistic, rule.op, rule.threshold, effect, sd, k, conf)
    if rule.statistic.startswith("kept_"):  # the catastrophic prompts leave the kept set: fewer prompts, same deltas
        from scipy import stats

        left = np.arange(k + 1)
        at = np.array([power_of(statistic, rule.op, rule.threshold, effect, sd, int(j), conf) if j >= 5 else 0.0 for j in left])
        return float(np.sum(stats.binom.pmf(left, k, 1 - q) * at))
    return simulated_power(statistic, rule.op, rule.threshold, effect, sd, k, conf, q)


def simulated_power(
    statistic: str, op: str, threshold: float, effect: float, sd: float, k: int, confidence: float, q: float, draws: int = 4000
) -> float:
    """Chance a delta rule passes when prompt deltas are N(effect, sd^2) except a share ``q`` at
    ``CATASTROPHIC_EXCESS`` (a mixture the noncentral t does not describe), by simulating the t
    interval the gate computes (fixed seed)."""
    from scipy import stats

    rng = np.random.default_rng(56)
    d = np.where(rng.random((draws, k)) < q, CATASTROPHIC_EXCESS, rng.normal(effect, sd, (draws, k)))
    mean = d.mean(axis=1)
    half = float(stats.t.ppf(0.5 + confidence / 2, k - 1)) * d.std(axis=1, ddof=1) / math.sqrt(k)
    value = mean if statistic.endswith("_mean") else (mean + half if statistic.endswith("_high") else mean - half)
    passed = value <= threshold if op == "<=" else value >= threshold
    return float(passed.mean())


def _row(
    rule: GateRule,
    label: str,
    p: PilotDeltas,
    k: int,
    seeds: int,
    conf: float,
    q: float,
    target: float,
    power: float,
    note: str | None,
    pilot: str,
) -> RulePower:
    if rule.statistic == "new_failure_rate_high":
        rate = p.new_failure_rate + q * (1 - p.new_failure_rate)
        return RulePower(label, p.candidate, rate, None, k, seeds, conf, power, None, {}, note, pilot)
    statistic, effect, sd = rule.statistic.removeprefix("kept_"), float(p.deltas.mean()), _sd_at(p, seeds)
    needed: int | None = None
    by_seeds: dict[int, int | None] = {}
    if q == 0:
        needed = prompts_needed(statistic, rule.op, rule.threshold, effect, sd, conf, target)
        by_seeds = {s: prompts_needed(statistic, rule.op, rule.threshold, effect, _sd_at(p, s), conf, target) for s in (1, 2, 4)}
        if p.seed_var is None:
            note = "; ".join(x for x in (note, "the pilot had one seed per prompt: more seeds are assumed not to help") if x)
    return RulePower(label, p.candidate, effect, sd, k, seeds, conf, None if math.isnan(power) else power, needed, by_seeds, note, pilot)


def power_warning(results: list[RulePower]) -> str | None:
    """A one-line flag when any assessed rule has under ``FLAG_POWER`` power at the policy's design."""
    weak = [r for r in results if r.power is not None and r.power < FLAG_POWER and r.pilot == "as measured"]
    if not weak:
        return None
    parts = [
        f"{r.rule}: {100 * r.power:.0f}% at {r.prompts} prompts, "
        + (f"{r.prompts_needed} prompts for 80%" if r.prompts_needed else "no prompt count up to the search limit reaches 80%")
        for r in weak
        if r.power is not None
    ]
    return f"under {100 * FLAG_POWER:.0f}% power at the policy's own margin ({'; '.join(parts)})"
