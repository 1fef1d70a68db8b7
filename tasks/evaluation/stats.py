"""Statistics for evaluations: prompt-clustered bootstrap intervals and paired comparisons."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy.stats import wilcoxon
from voxledger.schemas.evaluation import Interval


def clustered_interval(values: list[float], clusters: list[str], *, resamples: int, confidence: float, seed: int) -> Interval:
    """Mean with a percentile bootstrap CI that resamples whole clusters (prompts) with replacement.

    Rows of one prompt (several seeds) are not independent, so resampling rows would make the
    interval too narrow; resampling prompts keeps their correlation inside each draw.
    """
    if not values:
        raise ValueError("no values to summarise")
    groups: dict[str, list[float]] = defaultdict(list)
    for v, c in zip(values, clusters):
        groups[c].append(v)
    keys = sorted(groups)
    sums = np.array([sum(groups[k]) for k in keys])
    counts = np.array([len(groups[k]) for k in keys])
    mean = float(sums.sum() / counts.sum())
    if len(keys) == 1:
        return Interval(mean=mean, low=mean, high=mean, n=len(values))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(keys), size=(resamples, len(keys)))
    boot = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(boot, [alpha, 1 - alpha])
    return Interval(mean=mean, low=float(low), high=float(high), n=len(values))


def paired_delta(
    cand: dict[tuple[str, int], float], base: dict[tuple[str, int], float], *, resamples: int, confidence: float, seed: int
) -> tuple[Interval, float | None, int]:
    """Delta (candidate - baseline) over shared (prompt, seed) keys: clustered CI, Wilcoxon p, n."""
    keys = sorted(set(cand) & set(base))
    if not keys:
        raise ValueError("no shared (prompt, seed) pairs")
    diffs = [cand[k] - base[k] for k in keys]
    interval = clustered_interval(diffs, [k[0] for k in keys], resamples=resamples, confidence=confidence, seed=seed)
    p: float | None = None
    if len(diffs) >= 2 and any(d != 0 for d in diffs):
        p = float(wilcoxon(diffs, zero_method="wilcox", alternative="two-sided").pvalue)
    return interval, p, len(keys)
