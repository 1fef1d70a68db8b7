"""What a gate of k prompts can say about catastrophic prompts, before it runs.

A challenger that fails a share q of prompts outright (WER +0.8) shows no failed prompt in (1 - q)^k
of gate evaluations: 16% at q = 5% and 36 prompts. On those evaluations its data look like a clean
challenger's, so no rule can both pass a clean challenger and hold a false-pass bound below
(1 - q)^k against it. ``new_failure_rate_high <= m`` (Clopper-Pearson) states the failure rate it
does bound; this module gives its exact pass probability at any true rate, the margin a gate of k
prompts can pass, and a one-line statement of what the gate resolves (``plan check``, ``plan power``).
"""

from __future__ import annotations

import math

from voxledger.schemas.promotion import PAIRED_STATISTICS, PromotionPolicy, new_failure_floor

CATASTROPHIC_RATE = 0.05
"""The reference share of catastrophic prompts (issue 56: 5% of prompts failing, +0.8 WER)."""
CATASTROPHIC_EXCESS = 0.8
"""The WER a catastrophic prompt adds."""


def challengers_of(policy: PromotionPolicy) -> int:
    """The most challengers a round of ``policy`` judges: best-k by CV loss, plus the last epoch."""
    return policy.best_k + (1 if policy.include_last else 0)


def one_sided_bound(confidence: float, challengers: int) -> float:
    """The false-pass rate per challenger a round's Bonferroni confidence promises (one-sided)."""
    return (1 - confidence) / max(1, challengers) / 2


def failure_margin(prompts: int, confidence: float, challengers: int, at_least: float = 0.15) -> float:
    """The smallest margin in hundredths, at least ``at_least``, that ``new_failure_rate_high`` can
    pass with ``prompts`` gate prompts (the upper end for none newly failed: ``new_failure_floor``)."""
    return max(at_least, math.ceil(100 * new_failure_floor(prompts, confidence, challengers)) / 100)


def passable_failures(prompts: int, tail: float, margin: float) -> int:
    """The most newly failed prompts of ``prompts`` whose Clopper-Pearson upper end (one-sided
    ``tail``) is at most ``margin``; -1 when even none is above it."""
    from scipy import stats  # ~0.7 s of imports: here, not at plan load

    x = -1
    while x + 1 < prompts and float(stats.beta.ppf(1 - tail, x + 2, prompts - x - 1)) <= margin:
        x += 1
    return x


def failure_pass_probability(rate: float, prompts: int, tail: float, margin: float) -> float:
    """Exact chance that ``new_failure_rate_high <= margin`` passes a challenger that newly fails
    each prompt with probability ``rate`` (binomial: P(X <= the most passable count))."""
    from scipy import stats

    x = passable_failures(prompts, tail, margin)
    return 0.0 if x < 0 else float(stats.binom.cdf(x, prompts, rate))


def prompts_to_resolve(rate: float, bound: float) -> int:
    """The fewest gate prompts at which a challenger failing ``rate`` of prompts shows none in at
    most ``bound`` of gate evaluations: below it no rule that passes a clean challenger holds ``bound``."""
    return math.ceil(math.log(bound) / math.log(1 - rate))


def resolution(policy: PromotionPolicy, rate: float = CATASTROPHIC_RATE) -> str | None:
    """What ``policy``'s gate can say about a challenger failing ``rate`` of prompts catastrophically,
    in one line; None when the policy has no rule on an error rate (WER, CER)."""
    error_rules = [r for r in policy.rules if r.metric.split(":")[0] in ("wer", "cer")]
    if not error_rules:
        return None
    k, confidence, m = len(policy.gate_plan.prompts), policy.gate_plan.statistics.confidence, challengers_of(policy)
    bound = one_sided_bound(confidence, m)
    blind = (1 - rate) ** k
    need = prompts_to_resolve(rate, bound)
    failure = [r for r in error_rules if r.statistic == "new_failure_rate_high"]
    if failure:
        margin = min(r.threshold for r in failure)
        passes = failure_pass_probability(rate, k, bound, margin)
        said = (
            f"new_failure_rate_high <= {margin:g} bounds the newly failed share at {100 * margin:.0f}% ({100 * bound:.2f}% false "
            f"passes per challenger at that rate); a challenger failing {100 * rate:g}% of prompts passes it {100 * passes:.1f}% "
            "of the time"
        )
    else:
        mean_rules = sorted({f"{r.statistic}({r.metric})" for r in error_rules if r.statistic in PAIRED_STATISTICS})
        said = (
            f"{', '.join(mean_rules) or 'its error-rate rules'} read(s) a mean that a few catastrophic prompts make optimistic "
            f"whenever the sample misses them, and no rule bounds the newly failed share (add new_failure_rate_high)"
        )
    if failure and passes <= bound:
        verdict = f"the gate holds {100 * bound:.2f}% against a challenger failing {100 * rate:g}% of prompts"
    elif k < need:
        verdict = (
            f"with {k} gate prompts no rule can hold {100 * bound:.2f}% against a challenger failing {100 * rate:g}% of prompts "
            f"(+{CATASTROPHIC_EXCESS:g} WER) and still pass a clean one: it shows no failed prompt in {100 * blind:.1f}% of gate "
            f"evaluations; {need} prompts would"
        )
    else:
        verdict = (
            f"{k} gate prompts could hold {100 * bound:.2f}% against a challenger failing {100 * rate:g}% of prompts, but the "
            f"rules do not: bound new_failure_rate_high below {100 * rate:g}% (the load check gives the smallest passable margin)"
        )
    return f"catastrophic prompts: {verdict}; {said}"
