"""``voxledger bench --only stats``: the shipped demo gate under catastrophic prompts, and outliers.

The gate's content rules are the ones the demo plans are generated with
(``demo_plans.catastrophe_rules``), at 20, 36 and 60 prompts (the failure margin each size can
pass), judged by ``judge`` on comparisons from ``paired_delta`` / ``failure_split`` at the round's
Bonferroni confidence (3 challengers). Incumbent WER per prompt ~ Beta(2, 10); a catastrophic
prompt adds +0.8. Scenarios, each at a boundary of what the gate claims, so any pass is false:

- *at the failure margin*: the challenger newly fails each prompt with probability m (the
  margin), the other prompts unchanged (noise sd 0.05; the incumbent's WER is capped at 0.49, so
  every failure is a new one);
- *5% catastrophic, kept at the WER margin*: 5% of prompts fail, the rest rise by the margin 0.15;
- *5% catastrophic, no true difference* (mean delta 0): not a boundary of the claim (5% is under
  any margin 60 prompts can pass), so its pass rate is descriptive; ``plan check`` states it
  before the gate runs. The contrast row is the former rule ``delta_high <= 0.15`` with 5% of
  prompts failing and the mean delta at its margin (issue 56: 16.7% per challenger at 36 prompts).

Goals: per challenger at most (1 - 0.95) / 2 / 3 = 0.83%, per round at most 2.5%.

*Outliers both ways*: 20 prompt means N(0, 1), each an outlier of +-5 with probability 0.1:
coverage of ``cluster_t`` and ``cluster_bootstrap_t`` (whose sides are at least the t interval's).
"""

from __future__ import annotations

import math

import numpy as np

from voxledger.bench_sections.common import Figure
from voxledger.bench_sections.stats_robust import SETTINGS, Draw, _comparison, _goal, _passes, _pct
from voxledger.schemas.evaluation import StatisticsSettings
from voxledger.schemas.promotion import GateRule
from voxledger.tasks.corpus.demo_plans import GATE_STATISTICS, catastrophe_rules
from voxledger.tasks.evaluation.catastrophic import CATASTROPHIC_EXCESS, CATASTROPHIC_RATE, one_sided_bound
from voxledger.tasks.evaluation.stats import bootstrap_t_interval, interval_of_means
from voxledger.tasks.power import round_confidence

SIZES = (20, 36, 60)
CHALLENGERS = 3
WER_MARGIN = 0.15
PER_CHALLENGER = 100 * one_sided_bound(SETTINGS.confidence, CHALLENGERS)
PER_ROUND = 100 * (1 - SETTINGS.confidence) / 2


def shipped_rules(prompts: int) -> list[GateRule]:
    """The demo gate's content rules at ``prompts`` prompts, on the bench's WER metric."""
    return [GateRule.model_validate({**r, "metric": "wer:basic"}) for r in catastrophe_rules("wer:basic", "WER", prompts)]


def shifted(q: float, shift: float) -> Draw:
    """(challenger, incumbent): a share ``q`` of prompts fails (+0.8), the rest rise by ``shift``."""

    def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
        b = np.minimum(rng.beta(2, 10, k), 0.49)  # the incumbent fails no prompt: every failure is a new one
        c = np.where(rng.random(k) < q, b + CATASTROPHIC_EXCESS, b + shift + rng.normal(0, 0.05, k))
        return np.clip(c, 0, None), b

    return draw


WORDS = 8
"""Words per demo gate prompt (Harvard sentences: 7-10)."""


def word_noise(words: int) -> Draw:
    """(challenger, incumbent) with no true difference: each side's errors on a prompt ~ Binomial(words,
    p), p per prompt ~ Beta(1.2, 2) (mean 0.37, sd 0.24: the demo incumbent's WER per prompt measured
    0.37 and 0.26). Independent draws are the pessimistic case: paired sd ~0.24 against 0.26-0.28
    measured, and the measured pairs never reached the failure increase (max 0.50 of 72), while
    independent draws do now and then."""

    def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
        p = rng.beta(1.2, 2.0, k)
        return rng.binomial(words, p) / words, rng.binomial(words, p) / words

    return draw


def _goal_of(value: float, bound: float, reps: int) -> str:
    """At most ``bound`` % plus two Monte Carlo standard errors (a pass rate at its bound exactly)."""
    allowed = bound + 200 * math.sqrt(bound / 100 * (1 - bound / 100) / reps)
    return f"<= {bound:.2f} (+2 se: {allowed:.2f}): " + ("ok" if value <= allowed else "SHORT")


GATE = SETTINGS.model_copy(update=GATE_STATISTICS)
"""The shipped demo gate's statistics: a prompt is failed by the side worse on it by ``FAILURE_INCREASE``."""


def false_passes(
    draw: Draw, rules: list[GateRule], k: int, reps: int, rng: np.random.Generator, settings: StatisticsSettings = GATE
) -> tuple[float, float]:
    """(% per challenger, % per 3-challenger round) passing ``rules`` at the round's confidence."""
    st = settings.model_copy(update={"confidence": round_confidence(settings.confidence, CHALLENGERS)})
    one = per_round = 0
    for _ in range(reps):
        passed = [_passes(_comparison(*draw(rng, k), st), rules) for _ in range(CHALLENGERS)]
        one += passed[0]
        per_round += any(passed)
    return _pct(one, reps), _pct(per_round, reps)


def shipped_gate_rows(k: int, reps: int, seed: int) -> list[Figure]:
    """The shipped gate at ``k`` prompts: both boundaries of its claim, the descriptive null, the former rule."""
    rng, rules = np.random.default_rng(seed), shipped_rules(k)
    margin = next(r.threshold for r in rules if r.statistic == "new_failure_rate_high")
    label = f"shipped demo gate, {k} prompts (new_failure_rate_high <= {margin:g}, kept_delta_high <= {WER_MARGIN:g})"
    figures = []
    for what, draw in (
        (f"challenger newly failing {100 * margin:g}% of prompts (the failure margin)", shifted(margin, 0.0)),
        (f"{100 * CATASTROPHIC_RATE:g}% catastrophic, the rest at the WER margin", shifted(CATASTROPHIC_RATE, WER_MARGIN)),
    ):
        one, per_round = false_passes(draw, rules, k, reps, rng)
        figures.append(Figure(f"{label}: {what}: false pass per challenger", one, "%", _goal_of(one, PER_CHALLENGER, reps)))
        figures.append(Figure(f"{label}: {what}: false pass per 3-challenger round", per_round, "%", _goal_of(per_round, PER_ROUND, reps)))
    one, _ = false_passes(
        shifted(CATASTROPHIC_RATE, -CATASTROPHIC_RATE * CATASTROPHIC_EXCESS / (1 - CATASTROPHIC_RATE)), rules, k, reps, rng
    )
    blind = 100 * (1 - CATASTROPHIC_RATE) ** k
    figures.append(Figure(f"{label}: 5% catastrophic, mean delta 0: passes (no failure seen in {blind:.1f}%)", one, "%", "descriptive"))
    one, _ = false_passes(word_noise(WORDS), rules, k, reps, rng)
    figures.append(
        Figure(f"{label}: clean challenger, word-error noise ({WORDS} words a prompt, demo-like rates): passes", one, "%", "descriptive")
    )
    former = [GateRule(metric="wer:basic", statistic="delta_high", op="<=", threshold=WER_MARGIN)]
    at_margin = shifted(CATASTROPHIC_RATE, (WER_MARGIN - CATASTROPHIC_RATE * CATASTROPHIC_EXCESS) / (1 - CATASTROPHIC_RATE))
    one, per_round = false_passes(at_margin, former, k, reps, rng)
    contrast = f"former rule delta_high <= {WER_MARGIN:g}, {k} prompts, 5% catastrophic, mean delta at the margin"
    figures.append(Figure(f"{contrast}: false pass per challenger (contrast)", one, "%", "contrast"))
    figures.append(Figure(f"{contrast}: false pass per 3-challenger round (contrast)", per_round, "%", "contrast"))
    return figures


def outlier_rows(reps: int, seed: int) -> list[Figure]:
    """Coverage at 20 prompts when a few prompts are outliers in both directions."""
    boot = StatisticsSettings(interval="cluster_bootstrap_t", bootstrap_resamples=999)
    rng = np.random.default_rng(seed)
    covered = {"cluster_t": 0, "cluster_bootstrap_t": 0}
    alone = 0
    for _ in range(reps):
        means = np.where(rng.random(20) < 0.1, rng.choice((-5.0, 5.0), 20), rng.normal(0, 1, 20))
        for st in (SETTINGS, boot):
            iv = interval_of_means(means, 20, st)
            covered[st.interval] += iv.low is not None and iv.low <= 0 <= (iv.high or 0)
        low, high = bootstrap_t_interval(means, boot.confidence, boot.bootstrap_resamples, boot.bootstrap_seed)
        alone += low <= 0 <= high
    figures = [
        Figure(f"{m}, 20 x 1, outliers both ways: coverage at 95%", _pct(n, reps), "%", _goal(_pct(n, reps), "cover"))
        for m, n in covered.items()
    ]
    return figures + [
        Figure("bootstrap-t alone (former cluster_bootstrap_t), 20 x 1, outliers both ways: coverage", _pct(alone, reps), "%", "contrast")
    ]


def bench_catastrophic(reps: int) -> list[Figure]:
    """The shipped gate at 20, 36 and 60 prompts under catastrophic prompts, and the outlier rows."""
    figures: list[Figure] = []
    for i, k in enumerate(SIZES):
        figures += shipped_gate_rows(k, max(20, reps // 2), seed=41 + i)  # ~0.2 s a data set at 60 prompts
    return figures + outlier_rows(max(100, reps // 4), seed=44)
