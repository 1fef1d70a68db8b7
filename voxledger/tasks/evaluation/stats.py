"""Statistics for evaluations, with the prompt as the independent unit.

Seeds are nested in prompts: rows of one prompt share its text, length and difficulty, so they
are averaged within the prompt first and every interval and test works on the per-prompt means
(k units, not k x seeds rows). Methods (docs/statistics.md has their measured error rates):

- ``cluster_t``: t interval / one-sample t test on prompt means, df = k - 1 (``scipy.stats``).
- ``cluster_bootstrap_t``: studentized bootstrap of the prompt means (resampling prompts), which
  follows a skewed metric better than the t interval once there are enough prompts.

Fewer prompts than the method needs (``MIN_PROMPTS``), or no spread between prompts, give an
interval reported as not estimable (``low``/``high`` None and a ``note``), never a zero-width one.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
from scipy import stats

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.evaluation import MIN_PROMPTS, Interval, PairedTest, StatisticsSettings


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
        groups[c].append(v)
    return np.array([np.mean(groups[k]) for k in sorted(groups)])


def _not_estimable(means: np.ndarray, n: int, settings: StatisticsSettings) -> str | None:
    need = MIN_PROMPTS[settings.interval]
    if means.size < need:
        return f"{means.size} prompt(s); {settings.interval} needs at least {need} (add prompts to the plan)"
    if np.ptp(means) == 0:
        return f"all {means.size} prompt means equal {means[0]:g}: no spread between prompts, so no interval can be estimated"
    return None


def t_interval(means: np.ndarray, confidence: float) -> tuple[float, float]:
    """t interval on unit means (df = units - 1)."""
    se = float(stats.sem(means))
    low, high = stats.t.interval(confidence, df=means.size - 1, loc=float(means.mean()), scale=se)
    return float(low), float(high)


def bootstrap_t_interval(means: np.ndarray, confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """Studentized (bootstrap-t) interval: resample units, pivot on (mean* - mean) / se*.

    Draws in which every unit is the same (se* = 0) carry no pivot and are left out; with 5 units
    that is 5 / 3125 of the draws.
    """
    k, m, se = means.size, float(means.mean()), float(stats.sem(means))
    draws = means[np.random.default_rng(seed).integers(0, k, size=(resamples, k))]
    boot_se = draws.std(axis=1, ddof=1) / math.sqrt(k)
    ok = boot_se > 0
    pivots = (draws.mean(axis=1)[ok] - m) / boot_se[ok]
    tail = (1 - confidence) / 2
    q_low, q_high = np.quantile(pivots, [tail, 1 - tail])
    return m - float(q_high) * se, m - float(q_low) * se


def interval_of_means(means: np.ndarray, n: int, settings: StatisticsSettings) -> Interval:
    """The plan's interval over unit means (not estimable when too few units or no spread)."""
    note = _not_estimable(means, n, settings)
    base = {"mean": float(means.mean()), "n": n, "method": settings.interval, "units": int(means.size)}
    if note is not None:
        return Interval(**base, low=None, high=None, note=note)  # type: ignore[arg-type]
    if settings.interval == "cluster_t":
        low, high = t_interval(means, settings.confidence)
    else:
        low, high = bootstrap_t_interval(means, settings.confidence, settings.bootstrap_resamples, settings.bootstrap_seed)
    return Interval(**base, low=low, high=high)  # type: ignore[arg-type]


def clustered_interval(values: list[float], clusters: list[str], settings: StatisticsSettings, what: str = "values") -> Interval:
    """Mean of per-prompt means with the plan's interval; ``clusters`` gives each value's prompt id.

    Raises:
        EvaluationError: lengths differ, no values, or a value is NaN or infinite.
    """
    return interval_of_means(prompt_means(values, clusters, what), len(values), settings)


def t_test(means: np.ndarray, settings: StatisticsSettings) -> PairedTest:
    """One-sample t test of mean 0 on unit means; not estimable below the minimum or without spread."""
    need = MIN_PROMPTS[settings.test]
    note = None
    if means.size < need:
        note = f"{means.size} prompt(s); {settings.test} needs at least {need} (add prompts to the plan)"
    elif np.ptp(means) == 0:
        note = f"all {means.size} prompt deltas equal {means[0]:g}: no spread, the test is undefined"
    if note is not None:
        return PairedTest(method=settings.test, units=int(means.size), statistic=None, p_value=None, note=note)
    res = stats.ttest_1samp(means, 0.0)
    return PairedTest(method=settings.test, units=int(means.size), statistic=float(res.statistic), p_value=float(res.pvalue))


def paired_delta(
    cand: dict[tuple[str, int], float], base: dict[tuple[str, int], float], settings: StatisticsSettings, what: str = "delta"
) -> tuple[Interval, PairedTest, int]:
    """Delta (candidate - baseline) over shared (prompt, seed) keys, averaged per prompt.

    Returns the interval of the mean delta, the test at the prompt level, and the number of pairs.

    Raises:
        EvaluationError: no shared pairs, or a non-finite value.
    """
    keys = sorted(set(cand) & set(base))
    if not keys:
        raise EvaluationError(f"{what}: no shared (prompt, seed) pairs between candidate and baseline")
    diffs = [cand[k] - base[k] for k in keys]
    means = prompt_means(diffs, [k[0] for k in keys], what)
    return interval_of_means(means, len(diffs), settings), t_test(means, settings), len(keys)
