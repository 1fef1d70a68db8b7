"""Interval and multiplicity primitives shared by evaluation and listening statistics.

- ``no_spread``: is there any spread between units beyond floating-point round-off? Decided with a
  tolerance relative to the data's scale (never exact float equality) and to the precision the
  values were computed in (``round_off``: 1e-9 for float64, 1e-5 for float32, 1e-2 for float16),
  so a delta that is constant up to round-off is not estimable instead of a zero-width interval
  with p ~ 0.
- ``wilson`` (proportions), ``newcombe_paired`` (difference of two paired proportions, Newcombe
  1998 method 10): score intervals that never leave [0, 1] / [-1, 1].
- ``bounded_t``: a t interval that stays inside a metric's range; when the plain t interval
  crosses a bound it is recomputed on the logit (two bounds) or log (one bound) scale by the delta
  method and back-transformed, and the caller records that fallback in a note.
- ``adjust``: Holm (default) or Benjamini-Hochberg adjusted p-values (``statsmodels``; Holm's step-down
  by hand, because statsmodels' Holm branch runs a full ``gc.collect()`` on every call, 80 ms and more
  in a process holding models; the tests compare both with statsmodels).
"""

from __future__ import annotations

import math

import numpy as np

REL_TOL = 1e-9
"""Spread at or below this fraction of the data's scale is round-off, not variation (float64 values)."""
ROUND_OFF: dict[str, float] = {"float64": REL_TOL, "float32": 1e-5, "float16": 1e-2}
"""The same tolerance for values computed in each precision: about 2^25 float64 ulps, 2^7 float32
ulps (a float32 model run twice on other hardware moves a similarity by a few ulps), 2^3 float16 ulps."""

Bounds = tuple[float | None, float | None]


def precision(*values: object) -> str:
    """The narrowest floating precision among ``values`` (arrays or lists): an array's own dtype when
    it is a float narrower than float64, else ``float32`` when every value is exactly a float32 (what
    a float32 model's output is once widened to a Python float), else ``float64``."""
    found = "float64"
    for v in values:
        arr = np.asarray(v)
        if arr.size == 0:
            continue
        if arr.dtype.kind == "f" and arr.dtype.itemsize < 8:
            name = "float16" if arr.dtype.itemsize <= 2 else "float32"
        else:
            wide = arr.astype(np.float64)
            # integers (ratings, counts) are exact in any precision: they say nothing of how values were computed
            computed = wide[wide != np.round(wide)]
            name = "float32" if computed.size and np.array_equal(computed.astype(np.float32).astype(np.float64), computed) else "float64"
        if ROUND_OFF[name] > ROUND_OFF[found]:
            found = name
    return found


def round_off(*values: object) -> float:
    """The relative round-off tolerance for units computed from ``values`` (``ROUND_OFF`` of their ``precision``)."""
    return ROUND_OFF[precision(*values)]


def no_spread(units: np.ndarray, scale: float = 0.0, rel_tol: float | None = None) -> bool:
    """True when ``units`` are constant up to round-off relative to ``scale`` (or their own magnitude).

    ``scale`` is the magnitude of the values the units were computed from (for a delta, the
    candidate and baseline values): ``(a + 0.1) - a`` varies by ~1e-17 around 0.1, which is
    round-off at the scale of ``a``, not spread. ``rel_tol`` is the round-off of the precision those
    values were computed in (``round_off``); by default the units' own.
    """
    tol = round_off(units) if rel_tol is None else rel_tol
    ref = max(float(scale), float(np.max(np.abs(units))) if units.size else 0.0)
    return float(np.std(units)) <= tol * ref


def wilson(successes: float, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval for a proportion ``successes / n`` (inside [0, 1] by construction)."""
    from scipy import stats  # ~0.7 s of imports: here, not in every evaluation command

    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_paired(cand: np.ndarray, base: np.ndarray, confidence: float) -> tuple[float, float]:
    """Newcombe's (1998, method 10) interval for p_cand - p_base from paired 0/1 outcomes.

    Wilson intervals of the two marginal proportions, combined with the (corrected) phi
    correlation of the pairs; the result stays inside [-1, 1].
    """
    n = cand.size
    a = float(np.sum((cand == 1) & (base == 1)))
    b = float(np.sum((cand == 1) & (base == 0)))
    c = float(np.sum((cand == 0) & (base == 1)))
    d = n - a - b - c
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson(a + b, n, confidence)
    l2, u2 = wilson(a + c, n, confidence)
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    # Newcombe's phi: a positive numerator is reduced by n / 2 (not below 0), which keeps the
    # interval from narrowing on a few concordant pairs (as in Altman et al., Statistics with
    # Confidence, 2000, p. 52)
    num = a * d - b * c
    num = max(0.0, num - n / 2) if num > 0 else num
    phi = num / math.sqrt(denom) if denom > 0 else 0.0
    delta = p1 - p2
    low = delta - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    high = delta + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, low), min(1.0, high)


def inside(low: float, high: float, bounds: Bounds) -> bool:
    """True when [low, high] lies inside ``bounds`` (None = unbounded side)."""
    lo, hi = bounds
    return (lo is None or low >= lo) and (hi is None or high <= hi)


def bounded_t(
    mean: float, se: float, df: int | None, confidence: float, bounds: Bounds, quantile: float | None = None
) -> tuple[float, float, bool]:
    """t interval ``mean +- t * se``; when it leaves ``bounds``, the delta-method interval on the
    logit (two bounds) or log (one bound) scale, back-transformed. Returns (low, high, fell_back).

    ``quantile`` replaces the t quantile on ``df`` degrees of freedom when the reference
    distribution of the studentized statistic is not a t (e.g. simulated).
    The transformed interval needs the mean strictly inside the range; a mean on a bound has no
    spread left to transform, so the t interval is clipped to the range (still flagged).
    """
    if quantile is None and df is None:
        raise ValueError("bounded_t needs df or quantile")
    from scipy import stats

    q = float(stats.t.ppf(0.5 + confidence / 2, df)) if quantile is None else quantile
    low, high = mean - q * se, mean + q * se
    if inside(low, high, bounds):
        return low, high, False
    lo, hi = bounds
    if lo is not None and hi is not None and lo < mean < hi:
        p = (mean - lo) / (hi - lo)
        centre, half = math.log(p / (1 - p)), q * se / ((hi - lo) * p * (1 - p))
        back = [lo + (hi - lo) / (1 + math.exp(-x)) for x in (centre - half, centre + half)]
        return back[0], back[1], True
    if lo is not None and hi is None and mean > lo:
        centre, half = math.log(mean - lo), q * se / (mean - lo)
        return lo + math.exp(centre - half), lo + math.exp(centre + half), True
    if hi is not None and lo is None and mean < hi:
        centre, half = math.log(hi - mean), q * se / (hi - mean)
        return hi - math.exp(centre + half), hi - math.exp(centre - half), True
    return max(low, lo if lo is not None else low), min(high, hi if hi is not None else high), True


def delta_bounds(bounds: Bounds) -> Bounds:
    """The range of a difference of two values in ``bounds``: [lo - hi, hi - lo] when both exist."""
    lo, hi = bounds
    if lo is None or hi is None:
        return (None, None)
    return (lo - hi, hi - lo)


def adjust(p_values: list[float], method: str) -> list[float]:
    """Adjusted p-values over one family: ``holm`` (familywise error) or ``fdr_bh`` (false discovery rate)."""
    if not p_values:
        return []
    if method == "holm":
        return holm(p_values)
    from statsmodels.stats.multitest import multipletests  # ~0.4 s of imports, only where a family is adjusted

    return [float(x) for x in multipletests(p_values, method=method)[1]]


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values: the i-th smallest p times (m - i), made non-decreasing
    in that order, capped at 1 (``statsmodels.stats.multitest.multipletests(method="holm")``'s values)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    stepped = np.maximum.accumulate(p[order] * np.arange(len(p), 0, -1))
    adjusted = np.empty(len(p))
    adjusted[order] = np.minimum(stepped, 1.0)
    return [float(x) for x in adjusted]
