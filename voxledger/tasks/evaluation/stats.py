"""Statistics for evaluations, with the prompt as the independent unit.

Seeds are nested in prompts: rows of one prompt share its text, length and difficulty, so they
are averaged within the prompt first and every interval and test works on the per-prompt means
(k units, not k x seeds rows). Methods (docs/statistics.md has their measured error rates):

- ``cluster_t``: t interval / one-sample t test on prompt means, df = k - 1 (``scipy.stats``).
- ``cluster_bootstrap_t``: studentized bootstrap of the prompt means (resampling prompts), which
  follows a skewed metric better than the t interval once there are enough prompts; each side is
  at least as wide as the t interval's (outliers in both directions, docs/statistics.md).

Fewer prompts than the method needs (``MIN_PROMPTS``), or no spread between prompts beyond
round-off (``intervals.no_spread``, at the precision the values were computed in), give an interval reported as not estimable (``low``/``high``
None and a ``note``), never a zero-width one. Intervals stay inside the metric's range: Wilson for
0/1 rates, Newcombe for their paired differences, a logit/log-scale fallback (recorded in
``fallback``) when a t interval crosses a bound. Error rates also get a two-part comparison
(``failure_split``), and the p-values of one evaluation are adjusted as one family.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.evaluation import (
    MIN_PROMPTS,
    PROPORTION_METRICS,
    FailureSplit,
    Interval,
    Multiplicity,
    PairedTest,
    StatisticsSettings,
    metric_range,
)
from voxledger.tasks.evaluation.intervals import (
    REL_TOL,
    Bounds,
    adjust,
    bounded_t,
    delta_bounds,
    inside,
    newcombe_paired,
    no_spread,
    round_off,
    wilson,
)

ERROR_RATES = frozenset({"wer", "cer"})
"""Metrics compared in two parts as well (failed prompts, and the rest): ``failure_split``."""


def check_values(values: list[float], clusters: list[str], what: str) -> None:
    """Raise EvaluationError on a length mismatch, no values, or a non-finite value."""
    if len(values) != len(clusters):
        raise EvaluationError(f"{what}: {len(values)} values but {len(clusters)} prompt ids; pass exactly one prompt id per value")
    if not values:
        raise EvaluationError(f"{what}: no values to summarise; an interval needs at least one prompt")
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        raise EvaluationError(
            f"{what}: {len(bad)} non-finite value(s), first {values[bad[0]]} at index {bad[0]}; "
            "an extractor must record a failure as an invalid row, not as NaN or inf"
        )


def prompt_means(values: list[float], clusters: list[str], what: str = "values") -> np.ndarray:
    """Mean of each prompt's rows, in sorted prompt order (after ``check_values``)."""
    check_values(values, clusters, what)
    groups: dict[str, list[float]] = defaultdict(list)
    for v, c in zip(values, clusters, strict=True):
        groups[c].append(float(v))  # float32 inputs are averaged in float64 (their round-off is judged by ``round_off``)
    return np.array([np.mean(groups[k]) for k in sorted(groups)], dtype=float)


def _not_estimable(means: np.ndarray, settings: StatisticsSettings, scale: float, proportion: bool, rel_tol: float) -> str | None:
    need = MIN_PROMPTS[settings.interval]
    if means.size < need:
        return f"{means.size} prompt(s); {settings.interval} needs at least {need} (add prompts to the plan)"
    if not proportion and no_spread(means, scale, rel_tol):
        return (
            f"all {means.size} prompt means equal {means[0]:g} up to round-off: no spread between prompts, so no interval can be estimated"
        )
    return None


def t_interval(means: np.ndarray, confidence: float) -> tuple[float, float]:
    """t interval on unit means (df = units - 1)."""
    from scipy import stats  # scipy.stats is ~0.7 s of imports: here, not in every evaluation command

    se = float(stats.sem(means))
    low, high = stats.t.interval(confidence, df=means.size - 1, loc=float(means.mean()), scale=se)
    return float(low), float(high)


def bootstrap_t_interval(means: np.ndarray, confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """Studentized (bootstrap-t) interval: resample units, pivot on (mean* - mean) / se*.

    Draws in which every unit is the same (se* = 0) carry no pivot and are left out; with 5 units
    that is 5 / 3125 of the draws.
    """
    from scipy import stats

    k, m, se = means.size, float(means.mean()), float(stats.sem(means))
    draws = means[np.random.default_rng(seed).integers(0, k, size=(resamples, k))]
    boot_se = draws.std(axis=1, ddof=1) / math.sqrt(k)
    ok = boot_se > 0
    pivots = (draws.mean(axis=1)[ok] - m) / boot_se[ok]
    tail = (1 - confidence) / 2
    q_low, q_high = np.quantile(pivots, [tail, 1 - tail])
    return m - float(q_high) * se, m - float(q_low) * se


def interval_of_means(
    means: np.ndarray,
    n: int,
    settings: StatisticsSettings,
    *,
    bounds: Bounds = (None, None),
    scale: float = 0.0,
    proportion: bool = False,
    rel_tol: float = REL_TOL,
) -> Interval:
    """The plan's interval over unit means, inside ``bounds`` (not estimable when too few units or
    no spread beyond round-off relative to ``scale``).

    ``proportion``: the units are rates of a 0/1 outcome, and the Wilson interval over units is
    used (exact for one row per prompt, conservative with more, since a mean of values in [0, 1]
    with mean p has variance at most p(1 - p)). ``rel_tol``: the round-off of the precision the
    values were computed in (``intervals.round_off``), relative to ``scale``.
    """
    note = _not_estimable(means, settings, scale, proportion, rel_tol)
    mean = float(means.mean())
    base = {"mean": mean, "n": n, "units": int(means.size)}
    if note is not None:
        return Interval(**base, method=settings.interval, low=None, high=None, note=note)  # type: ignore[arg-type]
    if proportion:
        low, high = wilson(float(means.sum()), int(means.size), settings.confidence)
        return Interval(**base, method="wilson", low=low, high=high)  # type: ignore[arg-type]
    if settings.interval == "cluster_t":
        from scipy import stats

        low, high, fell_back = bounded_t(mean, float(stats.sem(means)), means.size - 1, settings.confidence, bounds)
        fallback = None
        if fell_back:
            fallback = f"the t interval left the range {_range(bounds)}; delta-method interval on the {_scale(bounds)} scale used"
        return Interval(**base, method="cluster_t", low=low, high=high, fallback=fallback)  # type: ignore[arg-type]
    low, high = bootstrap_t_interval(means, settings.confidence, settings.bootstrap_resamples, settings.bootstrap_seed)
    # never narrower than t on either side: with a few outliers in both directions the resamples
    # that miss one understate the spread, and the bootstrap-t alone covered 88-92% at 20 prompts
    t_low, t_high = t_interval(means, settings.confidence)
    low, high = min(low, t_low), max(high, t_high)
    fallback = None
    if not inside(low, high, bounds):
        lo, hi = bounds
        low, high = max(low, lo) if lo is not None else low, min(high, hi) if hi is not None else high
        fallback = f"the bootstrap-t interval left the range {_range(bounds)}; clipped to it"
    return Interval(**base, method="cluster_bootstrap_t", low=low, high=high, fallback=fallback)  # type: ignore[arg-type]


def _range(bounds: Bounds) -> str:
    lo, hi = bounds
    return f"[{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}]"


def _scale(bounds: Bounds) -> str:
    return "logit" if bounds[0] is not None and bounds[1] is not None else "log"


def clustered_interval(
    values: list[float], clusters: list[str], settings: StatisticsSettings, what: str = "values", metric: str | None = None
) -> Interval:
    """Mean of per-prompt means with the plan's interval; ``clusters`` gives each value's prompt id.

    ``metric`` (when given) sets the range the interval must stay inside and whether it is a
    proportion (``schemas.evaluation.METRIC_RANGES``, ``PROPORTION_METRICS``).

    Raises:
        EvaluationError: lengths differ, no values, or a value is NaN or infinite.
    """
    means = prompt_means(values, clusters, what)
    bounds = metric_range(metric) if metric else (None, None)
    scale = float(np.max(np.abs(np.asarray(values, dtype=float))))
    proportion = metric in PROPORTION_METRICS
    return interval_of_means(means, len(values), settings, bounds=bounds, scale=scale, proportion=proportion, rel_tol=round_off(values))


def t_test(means: np.ndarray, settings: StatisticsSettings, scale: float = 0.0, rel_tol: float = REL_TOL) -> PairedTest:
    """One-sample t test of mean 0 on unit means; not estimable below the minimum or without spread
    (beyond round-off ``rel_tol`` relative to ``scale``), so never p = 0 from a constant delta."""
    need = MIN_PROMPTS[settings.test]
    note = None
    if means.size < need:
        note = f"{means.size} prompt(s); {settings.test} needs at least {need} (add prompts to the plan)"
    elif no_spread(means, scale, rel_tol):
        note = f"all {means.size} prompt deltas equal {means[0]:g} up to round-off: no spread, the test is undefined"
    if note is not None:
        return PairedTest(method=settings.test, units=int(means.size), statistic=None, p_value=None, note=note)
    from scipy import stats

    res = stats.ttest_1samp(means, 0.0)
    return PairedTest(method=settings.test, units=int(means.size), statistic=float(res.statistic), p_value=float(res.pvalue))


def _paired_means(
    cand: dict[tuple[str, int], float], base: dict[tuple[str, int], float], what: str
) -> tuple[list[tuple[str, int]], np.ndarray, np.ndarray, float, float]:
    """(keys, candidate prompt means, baseline prompt means, scale, round-off tolerance)."""
    keys = sorted(set(cand) & set(base))
    if not keys:
        raise EvaluationError(f"{what}: no shared (prompt, seed) pairs between candidate and baseline")
    prompts = [k[0] for k in keys]
    c_values, b_values = [cand[k] for k in keys], [base[k] for k in keys]
    c = prompt_means(c_values, prompts, what)
    b = prompt_means(b_values, prompts, what)
    scale = float(max(np.max(np.abs(c)), np.max(np.abs(b))))
    return keys, c, b, scale, round_off(c_values, b_values)


def paired_delta(
    cand: dict[tuple[str, int], float],
    base: dict[tuple[str, int], float],
    settings: StatisticsSettings,
    what: str = "delta",
    metric: str | None = None,
) -> tuple[Interval, PairedTest, int]:
    """Delta (candidate - baseline) over shared (prompt, seed) keys, averaged per prompt.

    Returns the interval of the mean delta (inside the range a difference of ``metric`` can take;
    Newcombe's paired interval for a 0/1 metric with one seed), the test at the prompt level, and
    the number of pairs. Minimums count the prompts actually compared.

    Raises:
        EvaluationError: no shared pairs, or a non-finite value.
    """
    keys, c, b, scale, rel_tol = _paired_means(cand, base, what)
    means = c - b
    bounds = delta_bounds(metric_range(metric)) if metric else (None, None)
    test = t_test(means, settings, scale, rel_tol)
    one_row_per_prompt = len(keys) == means.size
    if metric in PROPORTION_METRICS and one_row_per_prompt and means.size >= MIN_PROMPTS[settings.interval]:
        low, high = newcombe_paired(c, b, settings.confidence)
        iv = Interval(mean=float(means.mean()), low=low, high=high, n=len(keys), method="newcombe_paired", units=int(means.size))
        return iv, test, len(keys)
    return interval_of_means(means, len(keys), settings, bounds=bounds, scale=scale, rel_tol=rel_tol), test, len(keys)


def failure_split(
    cand: dict[tuple[str, int], float], base: dict[tuple[str, int], float], settings: StatisticsSettings, what: str = "delta"
) -> FailureSplit:
    """Two-part comparison of an error rate: the difference of failed-prompt rates (Newcombe) and
    the delta over prompts neither side failed (the plan's interval).

    A few catastrophic prompts dominate a mean of error rates and make its t interval optimistic
    whenever the sample happens to miss them (docs/statistics.md); the two parts are each
    estimated with a method that holds its level, and a gate can bound both.
    """
    _, c, b, scale, rel_tol = _paired_means(cand, base, what)
    thr = settings.failure_threshold
    if settings.failure_rule == "increase":  # failed against the pair: worse than the other side by thr or more
        c_fail, b_fail = (c - b >= thr).astype(float), (b - c >= thr).astype(float)
    else:
        c_fail, b_fail = (c >= thr).astype(float), (b >= thr).astype(float)
    keep = (c_fail == 0) & (b_fail == 0)
    if c.size < MIN_PROMPTS[settings.interval]:
        rate = Interval(
            mean=float((c_fail - b_fail).mean()),
            low=None,
            high=None,
            n=int(c.size),
            method="newcombe_paired",
            units=int(c.size),
            note=f"{c.size} prompt(s); a failure-rate interval needs at least {MIN_PROMPTS[settings.interval]}",
        )
    else:
        low, high = newcombe_paired(c_fail, b_fail, settings.confidence)
        rate = Interval(
            mean=float((c_fail - b_fail).mean()), low=low, high=high, n=int(c.size), method="newcombe_paired", units=int(c.size)
        )
    diffs = (c - b)[keep]
    kept = interval_of_means(diffs, int(keep.sum()), settings, scale=scale, rel_tol=rel_tol) if diffs.size else None
    if kept is None:
        kept = Interval(mean=0.0, low=None, high=None, n=0, method=settings.interval, units=0, note="every prompt failed on one side")
    return FailureSplit(
        threshold=thr,
        prompts=int(c.size),
        candidate_failed=int(c_fail.sum()),
        baseline_failed=int(b_fail.sum()),
        rate_delta=rate,
        kept=kept,
        new_failures=new_failure_interval(c_fail, b_fail, settings),
    )


def new_failure_interval(c_fail: np.ndarray, b_fail: np.ndarray, settings: StatisticsSettings) -> Interval:
    """Clopper-Pearson interval of the rate of prompts the candidate failed and the baseline did not.

    That rate is at least the failure-rate difference, so its upper end bounds the increase; the
    interval is exact (binomial), and with no newly failed prompt its upper end is
    1 - ((1 - c) / 2)^(1/k) (0.125 at 36 prompts and a 3-challenger round's 98.33%), where
    Newcombe's interval of the difference gives 0.137.
    """
    from scipy import stats

    k, n = int(np.sum((c_fail == 1) & (b_fail == 0))), int(c_fail.size)
    tail = (1 - settings.confidence) / 2
    low = 0.0 if k == 0 else float(stats.beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - tail, k + 1, n - k))
    return Interval(mean=k / n, low=low, high=high, n=n, method="clopper_pearson", units=n)


def adjust_family(tests: list[PairedTest], family: str, method: Multiplicity) -> list[PairedTest]:
    """``tests`` with p-values adjusted over the family of those that are estimable (Holm or BH)."""
    idx = [i for i, t in enumerate(tests) if t.p_value is not None]
    adjusted = adjust([tests[i].p_value for i in idx], method)  # type: ignore[misc]
    out = list(tests)
    for i, p in zip(idx, adjusted, strict=True):
        out[i] = tests[i].model_copy(update={"p_adjusted": p, "adjustment": method, "family": family, "family_size": len(idx)})
    return out
