"""Listening-test statistics over unblinded, screened rows.

Raters and prompts are crossed: every rating shares a rater (bias in TTS MOS can exceed 2
points) and a prompt (some sentences are harder) with other ratings, so neither ratings nor
raters alone are independent. Every interval and test here is therefore clustered on both:

- Means per (criterion, candidate) and paired deltas ``b - a`` within (rater, prompt) with a
  two-way cluster-robust variance (Cameron, Gelbach & Miller 2011): V = V_rater + V_prompt -
  V_rater x prompt, each with the G / (G - 1) small-sample factor, max(V_rater, V_prompt) when the
  difference is not positive. The reference distribution of the t statistic is simulated from a
  crossed random-effects model fitted to the ratings (parametric bootstrap, ``METHOD``): a t on
  min(raters, prompts) - 1 degrees of freedom had too short a tail with few raters. Intervals
  stay inside the scale's range (logit-scale fallback), and the paired deltas of one aggregate
  are Holm-adjusted as one family before any candidate is called better.
  With fewer than ``MIN_RATERS`` raters or ``MIN_LISTENING_PROMPTS`` prompts, or no spread, the
  interval and test are reported as not estimable, and no candidate is called better. For A/B
  criteria the CMOS itself is the paired delta, oriented as b over a.
- Bradley-Terry strengths from A/B signs by Hunter's MM algorithm (ties count half), only when
  the maximum-likelihood estimate exists: a connected comparison graph whose win graph is
  strongly connected (Ford 1957); otherwise the strengths are reported as not identifiable.
- Krippendorff's alpha per criterion (``krippendorff``): ordinal for ACR/CMOS, interval for MUSHRA.
- Per-rater bias: mean of (own score - other raters' mean) over shared units.

Longer than 500 lines on purpose: every listening statistic shares the crossed rater x prompt
variance estimator and its parametric-bootstrap reference distribution, which must stay one
implementation.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Final

import krippendorff
import numpy as np
from scipy import optimize, stats
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.listening import MIN_LISTENING_PROMPTS, MIN_RATERS, Statistics, TaskType
from voxledger.schemas.listening_receipts import (
    Agreement,
    BradleyTerry,
    CandidateScore,
    PairedDelta,
    RaterBias,
    RatingRow,
)
from voxledger.tasks.evaluation.intervals import REL_TOL, Bounds, adjust, bounded_t, delta_bounds, no_spread, round_off

SCORED_ROLES = ("stimulus", "hidden_reference", "low_anchor", "mid_anchor")  # rated on the scale (agreement, bias)
SCREENING_SCORED = ("hidden_reference", "low_anchor", "mid_anchor")  # MUSHRA screening items: never compared as candidates


def _compared(r: RatingRow) -> bool:
    """An A/B comparison between two candidates (A/B gold items are screening, never compared)."""
    return r.task == "ab" and r.versus_candidate is not None and r.role == "stimulus"


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


METHOD: Final = "two_way_cluster_t_pretested_bootstrap"
"""The method every crossed interval and test records (``CandidateScore.method``, ``PairedDelta.method``)."""

SIMULATION_BLOCK = 500
"""Simulated data sets computed at once (bounds memory at block x cells)."""


@dataclass(frozen=True)
class CrossedEstimate:
    """A mean over ratings clustered on raters and prompts; bounds and test None when not estimable.

    ``df`` is None: the reference distribution of ``t`` is simulated (``METHOD``), not a t."""

    mean: float
    n: int
    raters: int
    prompts: int
    low: float | None = None
    high: float | None = None
    t: float | None = None
    df: int | None = None
    p_value: float | None = None
    note: str | None = None
    fallback: str | None = None
    components: tuple[float, float, float] | None = None  # fitted (rater, prompt, residual) variances of the working model


@dataclass(frozen=True)
class _Cells:
    """The (rater, prompt) cells of a crossed design: each cell's rater, prompt and rating count."""

    rater: np.ndarray
    prompt: np.ndarray
    count: np.ndarray
    raters: int
    prompts: int
    rater_map: np.ndarray  # (cells, raters) 0/1: which rater a cell belongs to
    prompt_map: np.ndarray  # (cells, prompts)

    @classmethod
    def of(cls, raters: np.ndarray, prompts: np.ndarray) -> tuple[_Cells, np.ndarray]:
        """The cells and, per rating, its cell index."""
        _, r = np.unique(raters, return_inverse=True)
        _, p = np.unique(prompts, return_inverse=True)
        n_p = int(p.max()) + 1
        keys, cell = np.unique(r * n_p + p, return_inverse=True)
        rater, prompt, n_r = keys // n_p, keys % n_p, int(r.max()) + 1
        cells = cls(
            rater=rater,
            prompt=prompt,
            count=np.bincount(cell).astype(float),
            raters=n_r,
            prompts=n_p,
            rater_map=(rater[:, None] == np.arange(n_r)[None, :]).astype(float),
            prompt_map=(prompt[:, None] == np.arange(n_p)[None, :]).astype(float),
        )
        return cells, cell

    def two_way_variance(self, sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(means, two-way cluster-robust variances of the means) from cell sums of shape (draws, cells).

        V = V_rater + V_prompt - V_cell, each sum of squared residual sums times G / (G - 1) / n^2,
        and max(V_rater, V_prompt) when V is not positive (Cameron, Gelbach & Miller 2011).
        """
        n = float(self.count.sum())
        means = sums.sum(axis=1) / n
        resid = sums - means[:, None] * self.count[None, :]
        parts = []
        for member, groups in ((self.rater_map, self.raters), (self.prompt_map, self.prompts)):
            parts.append(((resid @ member) ** 2).sum(axis=1) * groups / (groups - 1) / n**2)
        c = self.count.size
        v_cell = (resid**2).sum(axis=1) * c / (c - 1) / n**2 if c > 1 else np.zeros(resid.shape[0])
        v = parts[0] + parts[1] - v_cell
        return means, np.where(v > 0, v, np.maximum(parts[0], parts[1]))

    def components(self, y: np.ndarray, cell: np.ndarray) -> tuple[float, float, float]:
        """Moment estimates (non-negative least squares) of the rater, prompt and residual variances of
        y = mu + a_rater + b_prompt + e: the expected residual sums of squares by rater, by prompt and
        over ratings, matched to the observed ones."""
        n = float(self.count.sum())
        counts = np.zeros((self.raters, self.prompts))
        np.add.at(counts, (self.rater, self.prompt), self.count)
        n_r, n_p = counts.sum(axis=1), counts.sum(axis=0)
        resid = y - y.mean()
        ss_r = float((np.bincount(self.rater[cell], weights=resid, minlength=self.raters) ** 2).sum())
        ss_p = float((np.bincount(self.prompt[cell], weights=resid, minlength=self.prompts) ** 2).sum())
        ss_1 = float((resid**2).sum())

        def expected(k_r: np.ndarray, k_p: np.ndarray, k: np.ndarray) -> list[float]:
            l_r, l_p = k_r - np.outer(k, n_r) / n, k_p - np.outer(k, n_p) / n
            return [float((l_r**2).sum()), float((l_p**2).sum()), float((k - k**2 / n).sum())]

        design = np.array(
            [
                expected(np.diag(n_r), counts, n_r),
                expected(counts.T, np.diag(n_p), n_p),
                [n - float((n_r**2).sum()) / n, n - float((n_p**2).sum()) / n, n - 1],
            ]
        )
        fitted, _ = optimize.nnls(design, np.array([ss_r, ss_p, ss_1]))
        s_r, s_p, s_e = (float(x) for x in fitted)
        if s_e <= 0:  # every rating explained by rater and prompt: keep a residual at the ratings' spread
            s_e = ss_1 / max(1.0, n - 1)
        return s_r, s_p, s_e

    def effect_p_values(self, y: np.ndarray, cell: np.ndarray) -> tuple[float, float]:
        """p-values of the rater and of the prompt effect in the additive two-way model y = mu +
        a_rater + b_prompt + e, each F test adjusted for the other effect (type II sums of squares,
        least squares on indicator columns; unbalanced designs allowed). 0 when the residual has no
        degrees of freedom or no spread (the effect cannot be ruled out)."""
        rater, prompt = self.rater[cell], self.prompt[cell]
        ones = np.ones((y.size, 1))
        r_cols = (rater[:, None] == np.arange(1, self.raters)[None, :]).astype(float)
        p_cols = (prompt[:, None] == np.arange(1, self.prompts)[None, :]).astype(float)

        def rss(x: np.ndarray) -> tuple[float, int]:
            coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
            return float(((y - x @ coef) ** 2).sum()), int(rank)

        full, rank_full = rss(np.hstack([ones, r_cols, p_cols]))
        df_e = y.size - rank_full
        if df_e <= 0 or not full > REL_TOL**2 * float((y**2).sum()):
            return 0.0, 0.0
        out = []
        for reduced in (np.hstack([ones, p_cols]), np.hstack([ones, r_cols])):
            rss_reduced, rank_reduced = rss(reduced)
            df_effect = rank_full - rank_reduced
            if df_effect <= 0:
                out.append(1.0)
                continue
            f = (rss_reduced - full) / df_effect / (full / df_e)
            out.append(float(stats.f.sf(max(f, 0.0), df_effect, df_e)))
        return out[0], out[1]

    def simulate_t(self, components: tuple[float, float, float], draws: int, seed: int) -> np.ndarray:
        """|t| of the two-way clustered mean on ``draws`` data sets from the working model with mean 0."""
        s_r, s_p, s_e = (math.sqrt(x) for x in components)
        rng = np.random.default_rng(seed)
        out = []
        for start in range(0, draws, SIMULATION_BLOCK):
            b = min(SIMULATION_BLOCK, draws - start)
            sums = (
                s_r * rng.standard_normal((b, self.raters))[:, self.rater] * self.count
                + s_p * rng.standard_normal((b, self.prompts))[:, self.prompt] * self.count
                + s_e * np.sqrt(self.count) * rng.standard_normal((b, self.count.size))
            )
            means, v = self.two_way_variance(sums)
            out.append(np.abs(means) / np.sqrt(v))
        return np.concatenate(out)


NO_EFFECTS = (0.0, 0.0, 1.0)
"""The working model without rater or prompt variance (the scale does not matter to t)."""


PRETEST_ALPHA: Final = 0.2
"""A fitted rater or prompt variance enters the second reference only when its effect's F test has p below this."""


def reference(
    cells: _Cells, components: tuple[float, float, float], resamples: int, seed: int, effect_p: tuple[float, float] = (0.0, 0.0)
) -> np.ndarray:
    """Sorted simulated |t|: quantile by quantile the larger of the fitted model's and the pre-tested model's.

    The fitted rater and prompt variances are never negative, so they are biased upward when the
    true ones are small, and a larger rater or prompt share gives the variance estimate more weight
    on its few clusters' terms and a *shorter* tail than none at all: with no rater or prompt
    effect, the fitted reference alone passed Holm's first step over six pairs too often
    (familywise error 6-8%). The second reference keeps a fitted variance only where the two-way
    ANOVA F test of its effect (``effect_p``, rater then prompt) has p below ``PRETEST_ALPHA`` and
    sets it to 0 otherwise; the heavier of the two keeps the tail at least that of the model
    without the effects the data cannot show, and the fitted one's where the effects are real.
    (Always taking the no-effects model as the second reference also held the family, but made
    single tests conservative, 2.0-2.6% at a 5% level, where raters carry a real effect.)"""
    fitted = np.sort(cells.simulate_t(components, resamples, seed))
    pretested = (
        components[0] if effect_p[0] < PRETEST_ALPHA else 0.0,
        components[1] if effect_p[1] < PRETEST_ALPHA else 0.0,
        components[2],
    )
    if pretested == components:
        return fitted
    heavier: np.ndarray = np.maximum(fitted, np.sort(cells.simulate_t(pretested, resamples, seed)))
    return heavier


def crossed_mean(
    values: list[float],
    raters: list[str],
    prompts: list[str],
    confidence: float,
    bounds: Bounds = (None, None),
    resamples: int = 2000,
    seed: int = 0,
) -> CrossedEstimate:
    """Mean of ``values`` with a two-way (rater x prompt) cluster-robust interval and test of 0.

    The statistic is the two-way clustered t (Cameron, Gelbach & Miller 2011). Its reference
    distribution is simulated (a parametric bootstrap, ``resamples`` draws from ``seed``): data
    sets from y = a_rater + b_prompt + e with normal effects whose variances are fitted to
    ``values`` by moments, on the same design, studentized the same way. With few raters or
    prompts the variance estimate is itself very noisy, and a t on min(raters, prompts) - 1
    degrees of freedom then has too short a tail: p < 0.05 / 6 came about twice as often as it
    should, so a Holm family of six pairs erred ~10% of the time. The reference is the heavier of
    the fitted model's and the fitted model without the rater or prompt effect its F test does not
    show (``reference``). The
    interval is mean +- q * se with q the ``confidence`` quantile of the simulated |t|; p is the
    share of simulated |t| at least the observed one, (1 + count) / (resamples + 1).

    The interval stays inside ``bounds`` (the scale's range, or a delta's): when it crosses one,
    the logit-scale delta-method interval replaces it and ``fallback`` says so. A standard error at
    round-off level relative to the scores' magnitude counts as no spread.

    Raises:
        EvaluationError: the three lists differ in length, are empty, or a value is not finite.
    """
    if not (len(values) == len(raters) == len(prompts)):
        raise EvaluationError(
            f"{len(values)} values, {len(raters)} rater ids and {len(prompts)} prompt ids: pass one rater and one prompt per value"
        )
    if not values:
        raise EvaluationError("no ratings to summarise")
    rel_tol = round_off(values)  # before widening: float32 scores carry float32 round-off
    y = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(y)):
        i = int(np.flatnonzero(~np.isfinite(y))[0])
        raise EvaluationError(f"rating {i} (rater {raters[i]!r}, prompt {prompts[i]!r}) is {values[i]}; scores must be finite")
    n_r, n_p = len(set(raters)), len(set(prompts))
    est = CrossedEstimate(mean=float(y.mean()), n=y.size, raters=n_r, prompts=n_p)
    if n_r < MIN_RATERS or n_p < MIN_LISTENING_PROMPTS:
        return _with_note(
            est,
            f"{n_r} rater(s) x {n_p} prompt(s); the two-way clustered interval needs at least "
            f"{MIN_RATERS} raters and {MIN_LISTENING_PROMPTS} prompts",
        )
    cells, cell = _Cells.of(np.asarray(raters), np.asarray(prompts))
    _, var = cells.two_way_variance(np.bincount(cell, weights=y, minlength=cells.count.size)[None, :])
    v = float(var[0])
    scale = max((abs(b) for b in bounds if b is not None), default=0.0)
    if no_spread(y, scale, rel_tol) or not math.sqrt(max(v, 0.0)) > rel_tol * max(scale, float(np.max(np.abs(y)))):
        return _with_note(est, f"all {y.size} values equal {y[0]:g} up to round-off: no spread, so no interval can be estimated")
    se = math.sqrt(v)
    t = est.mean / se
    components = cells.components(y, cell)
    null = reference(cells, components, resamples, seed, cells.effect_p_values(y, cell))
    q = float(np.quantile(null, confidence))
    low, high, fell_back = bounded_t(est.mean, se, None, confidence, bounds, quantile=q)
    return CrossedEstimate(
        mean=est.mean,
        n=est.n,
        raters=n_r,
        prompts=n_p,
        low=low,
        high=high,
        t=t,
        p_value=float((1 + np.sum(null >= abs(t))) / (resamples + 1)),
        fallback=f"the interval left the range [{bounds[0]:g}, {bounds[1]:g}]; logit-scale interval used" if fell_back else None,
        components=components,
    )


def _with_note(est: CrossedEstimate, note: str) -> CrossedEstimate:
    return CrossedEstimate(mean=est.mean, n=est.n, raters=est.raters, prompts=est.prompts, note=note)


Cell = tuple[float, str, str]  # (value, rater, prompt)


def _columns(cells: list[Cell]) -> tuple[list[float], list[str], list[str]]:
    return [c[0] for c in cells], [c[1] for c in cells], [c[2] for c in cells]


Ranges = Mapping[str, tuple[float, float]]


def _score_bounds(ranges: Ranges | None, criterion: str, task: str) -> Bounds:
    if ranges is None or criterion not in ranges:
        return (None, None)
    lo, hi = ranges[criterion]
    return (-max(abs(lo), abs(hi)), max(abs(lo), abs(hi))) if task == "ab" else (lo, hi)


def candidate_scores(rows: list[RatingRow], spec: Statistics, ranges: Ranges | None = None) -> list[CandidateScore]:
    """Mean and crossed interval per (criterion, candidate); for A/B the mean CMOS advantage.

    ``ranges`` maps a criterion to its scale's [min, max] (ACR [1, 5], MUSHRA [0, 100], CMOS
    [-3, 3]); no interval leaves it. Candidate stimuli only: the MUSHRA hidden reference and low
    anchor are in ``screening_scores``.
    """
    groups: dict[tuple[str, TaskType, str], list[Cell]] = defaultdict(list)
    for r in rows:
        if r.versus_candidate and _compared(r):  # a CMOS credits B with +score and A with -score
            groups[(r.criterion, r.task, r.candidate)].append((r.score, r.rater_id, r.prompt_id))
            groups[(r.criterion, r.task, r.versus_candidate)].append((-r.score, r.rater_id, r.prompt_id))
        elif r.role == "stimulus":
            groups[(r.criterion, r.task, r.candidate)].append((r.score, r.rater_id, r.prompt_id))
    return _scores(groups, spec, ranges)


def screening_scores(rows: list[RatingRow], spec: Statistics, ranges: Ranges | None = None) -> list[CandidateScore]:
    """Mean per (criterion, screening role) of the MUSHRA hidden reference and low anchor; ``candidate`` is the role."""
    groups: dict[tuple[str, TaskType, str], list[Cell]] = defaultdict(list)
    for r in rows:
        if r.role in SCREENING_SCORED:
            groups[(r.criterion, r.task, r.role)].append((r.score, r.rater_id, r.prompt_id))
    return _scores(groups, spec, ranges)


def _scores(groups: dict[tuple[str, TaskType, str], list[Cell]], spec: Statistics, ranges: Ranges | None) -> list[CandidateScore]:
    out = []
    for (criterion, task, cand), cells in sorted(groups.items()):
        e = crossed_mean(*_columns(cells), spec.confidence, _score_bounds(ranges, criterion, task), spec.bootstrap_resamples, spec.seed)
        out.append(
            CandidateScore(
                criterion=criterion,
                task=task,
                candidate=cand,
                ratings=e.n,
                raters=e.raters,
                prompts=e.prompts,
                mean=_round(e.mean) or 0.0,
                ci_low=_round(e.low),
                ci_high=_round(e.high),
                method=METHOD,
                df=e.df,
                note=e.note,
                fallback=e.fallback,
            )
        )
    return out


def _paired(rows: list[RatingRow]) -> dict[tuple[str, TaskType, str, str], list[Cell]]:
    """(criterion, task, a, b) -> [(b - a, rater, prompt)], between candidate stimuli only."""
    out: dict[tuple[str, TaskType, str, str], list[Cell]] = defaultdict(list)
    cells: dict[tuple[str, TaskType, str, str], dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r.versus_candidate and _compared(r):
            a, b = sorted((r.versus_candidate, r.candidate))
            out[(r.criterion, "ab", a, b)].append((r.score if r.candidate == b else -r.score, r.rater_id, r.prompt_id))
        elif r.role == "stimulus":  # never against the hidden reference or the anchor: they are screening items
            cells[(r.criterion, r.task, r.rater_id, r.prompt_id)][r.candidate] = r.score
    for (criterion, task, rater, prompt), scores in cells.items():
        for a, b in combinations(sorted(scores), 2):
            out[(criterion, task, a, b)].append((scores[b] - scores[a], rater, prompt))
    return out


def paired_cells(rows: list[RatingRow]) -> dict[tuple[str, TaskType, str, str], list[Cell]]:
    """(criterion, task, a, b) -> [(b - a, rater, prompt)]: the pairs ``paired_deltas`` tests, between candidate stimuli only."""
    return _paired(rows)


def better_of(
    a: str, b: str, low: float | None, high: float | None, p_adjusted: float | None, alpha: float, *, lower_better: bool
) -> str | None:
    """The better of ``a`` and ``b`` from the interval of ``b - a``: the one scoring higher when the
    adjusted p-value is below ``alpha`` and the interval excludes 0 (the lower one for a criterion
    where lower is better); None when the difference is not established."""
    if p_adjusted is None or p_adjusted >= alpha:
        return None
    higher = b if low is not None and low > 0 else a if high is not None and high < 0 else None
    return None if higher is None else ({a: b, b: a}[higher] if lower_better else higher)


def paired_deltas(
    rows: list[RatingRow], spec: Statistics, directions: Mapping[str, str], ranges: Ranges | None = None
) -> list[PairedDelta]:
    """Every candidate pair per criterion: mean delta, crossed interval and t test.

    All pairs of one aggregate form one family: p-values are Holm-adjusted over it, and a
    candidate is called ``better`` only when its adjusted p-value is below 1 - confidence (and
    the interval agrees), so six pairs no longer give a one-in-four chance of a spurious verdict.
    """
    alpha = 1 - spec.confidence
    pairs = sorted(_paired(rows).items())
    bounds = []
    for (criterion, task, _, _), _ in pairs:
        lo, hi = _score_bounds(ranges, criterion, task)
        bounds.append(delta_bounds((lo, hi)) if task != "ab" else (lo, hi))
    estimates = [
        crossed_mean(*_columns(cells), spec.confidence, bnd, spec.bootstrap_resamples, spec.seed)
        for (_, cells), bnd in zip(pairs, bounds, strict=True)
    ]
    resamples = [spec.bootstrap_resamples] * len(pairs)
    need = family_resamples(spec.bootstrap_resamples, sum(e.p_value is not None for e in estimates), alpha)
    for i, ((_, cells), e) in enumerate(zip(pairs, estimates, strict=True)):
        # only a pair whose p could pass Holm needs the finer floor: an adjusted p is never below the raw one
        if need > spec.bootstrap_resamples and e.p_value is not None and e.p_value <= alpha:
            estimates[i] = crossed_mean(*_columns(cells), spec.confidence, bounds[i], need, spec.seed)
            resamples[i] = need
    raw = [e.p_value for e in estimates if e.p_value is not None]
    adjusted = iter(adjust(raw, "holm"))
    out = []
    for ((criterion, task, a, b), _), e, drawn in zip(pairs, estimates, resamples, strict=True):
        p_adj = next(adjusted) if e.p_value is not None else None
        better = better_of(a, b, e.low, e.high, p_adj, alpha, lower_better=task != "ab" and directions.get(criterion) == "lower_better")
        out.append(
            PairedDelta(
                criterion=criterion,
                task=task,
                a=a,
                b=b,
                pairs=e.n,
                raters=e.raters,
                prompts=e.prompts,
                mean_delta=_round(e.mean) or 0.0,
                ci_low=_round(e.low),
                ci_high=_round(e.high),
                method=METHOD,
                t_statistic=_round(e.t),
                df=e.df,
                p_value=_round(e.p_value),
                p_adjusted=_round(p_adj),
                adjustment="holm" if p_adj is not None else None,
                family="every paired delta of this aggregate" if p_adj is not None else None,
                family_size=len(raw) if p_adj is not None else None,
                better=better,
                note=e.note,
                fallback=e.fallback,
                resamples=drawn if e.p_value is not None else None,
            )
        )
    return out


FLOOR_MARGIN: Final = 10
"""Simulated data sets per test are at least ``FLOOR_MARGIN`` x family size / alpha: the p-value floor
1 / (B + 1) then sits a tenth below Holm's first threshold alpha / m, and a p near that threshold rests
on about ten simulated |t| beyond it, not on none."""
MAX_RESAMPLES: Final = 200_000
"""The most simulated data sets one test draws (a family past 1,000 pairs then states that its floor binds)."""


def family_resamples(base: int, family_size: int, alpha: float) -> int:
    """Simulated data sets for each test of a Holm family of ``family_size`` at level ``alpha``.

    A simulated p-value is at least 1 / (B + 1); with 2,000 draws that is 5e-4, above Holm's first
    threshold 0.05 / m for m > 100 pairs (15 candidates give 105), so no pair could ever be called
    better. The count grows with the family instead (``FLOOR_MARGIN``), up to ``MAX_RESAMPLES``.
    """
    return min(MAX_RESAMPLES, max(base, math.ceil(FLOOR_MARGIN * family_size / alpha) - 1))


def floor_binds(resamples: int, family_size: int, alpha: float) -> bool:
    """True when no p-value from ``resamples`` draws can pass Holm's first step over ``family_size`` tests."""
    return family_size * (1 / (resamples + 1)) >= alpha


def win_matrix(rows: list[RatingRow], criterion: str) -> tuple[list[str], np.ndarray, int]:
    """Candidates, wins[i, j] (i beat j; a tie counts half to each) and the number of A/B comparisons."""
    ab = [r for r in rows if _compared(r) and r.criterion == criterion]
    names = sorted({c for r in ab for c in (r.candidate, r.versus_candidate or "")})
    idx = {n: i for i, n in enumerate(names)}
    wins = np.zeros((len(names), len(names)))
    for r in ab:
        if not math.isfinite(r.score):
            raise EvaluationError(f"A/B score of rater {r.rater_id!r} on {r.prompt_id!r} is {r.score}; scores must be finite")
        b, a = idx[r.candidate], idx[r.versus_candidate or ""]
        wins[b, a] += 1.0 if r.score > 0 else 0.5 if r.score == 0 else 0.0
        wins[a, b] += 1.0 if r.score < 0 else 0.5 if r.score == 0 else 0.0
    return names, wins, len(ab)


def identifiability(names: list[str], wins: np.ndarray) -> str | None:
    """Why the Bradley-Terry MLE does not exist, or None when it does (Ford 1957 / Hunter 2004).

    The comparison graph must be connected, and the win graph (i -> j when i beat j at least once)
    strongly connected: otherwise some group of candidates won (or lost) every comparison with
    the rest and its strength runs off to infinity (separable data).
    """
    if len(names) < 2:
        return f"{len(names)} candidate(s) in A/B comparisons; strengths need at least 2"
    games = wins + wins.T
    n_weak, weak = connected_components(csr_matrix(games > 0), directed=False)
    if n_weak > 1:
        parts = [[n for n, c in zip(names, weak, strict=True) if c == k] for k in range(n_weak)]
        return f"the comparison graph is disconnected ({parts}): strengths of unlinked groups cannot be compared"
    n_strong, strong = connected_components(csr_matrix(wins > 0), directed=True, connection="strong")
    if n_strong > 1:
        parts = [[n for n, c in zip(names, strong, strict=True) if c == k] for k in range(n_strong)]
        return f"separable data: {parts} won or lost every comparison across these groups, so the maximum-likelihood strengths do not exist"
    return None


def bradley_terry(rows: list[RatingRow], criterion: str, spec: Statistics) -> BradleyTerry:
    """Strengths from the signs of A/B scores (B won if > 0), MM iterations until ``bt_tolerance``."""
    names, wins, comparisons = win_matrix(rows, criterion)
    why = identifiability(names, wins)
    if why is not None:
        return BradleyTerry(
            criterion=criterion, identifiable=False, strengths=None, comparisons=comparisons, iterations=0, converged=False, note=why
        )
    games, total_wins = wins + wins.T, wins.sum(axis=1)
    p = np.full(len(names), 1.0 / len(names))
    converged, iterations = False, spec.bt_max_iterations
    for it in range(1, spec.bt_max_iterations + 1):
        new = total_wins / (games / (p[:, None] + p[None, :])).sum(axis=1)
        new = new / new.sum()
        if np.max(np.abs(new - p)) < spec.bt_tolerance:
            converged, p, iterations = True, new, it
            break
        p = new
    note = None if converged else f"no convergence to {spec.bt_tolerance:g} in {spec.bt_max_iterations} iterations"
    return BradleyTerry(
        criterion=criterion,
        strengths={n: round(float(p[i]), 6) for i, n in enumerate(names)},
        comparisons=comparisons,
        iterations=iterations,
        converged=converged,
        note=note,
    )


def _units(rows: list[RatingRow], criterion: str) -> dict[tuple[str, ...], dict[str, float]]:
    units: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r.criterion != criterion:
            continue
        if r.versus_candidate and _compared(r):
            a, b = sorted((r.versus_candidate, r.candidate))
            units[(r.prompt_id, a, b)][r.rater_id] = r.score if r.candidate == b else -r.score
        elif r.role in SCORED_ROLES:
            units[(r.prompt_id, r.candidate)][r.rater_id] = r.score
    return units


def agreement(rows: list[RatingRow], criterion: str, task: str) -> Agreement:
    """Krippendorff's alpha over the units rated by two or more raters."""
    level = "interval" if task == "mushra" else "ordinal"
    units = {u: v for u, v in _units(rows, criterion).items() if len(v) >= 2}
    values = {s for v in units.values() for s in v.values()}
    if not units or len(values) < 2:
        note = "no unit rated by two raters" if not units else "every rating has the same value"
        return Agreement(criterion=criterion, level=level, alpha=None, units=len(units), note=note)  # type: ignore[arg-type]
    raters = sorted({r for v in units.values() for r in v})
    data = np.full((len(raters), len(units)), np.nan)
    for j, v in enumerate(units.values()):
        for rater, score in v.items():
            data[raters.index(rater), j] = score
    alpha = krippendorff.alpha(reliability_data=data, level_of_measurement=level)  # type: ignore[arg-type]  # a checked literal
    return Agreement(criterion=criterion, level=level, alpha=_round(alpha, 4), units=len(units))  # type: ignore[arg-type]


def rater_bias(rows: list[RatingRow], included: set[str]) -> list[RaterBias]:
    """Each rater's mean offset from the included other raters on the same units (ACR/MUSHRA)."""
    out = []
    for criterion in sorted({r.criterion for r in rows if r.task != "ab"}):
        units = _units([r for r in rows if r.task != "ab"], criterion)
        diffs: dict[str, list[float]] = defaultdict(list)
        for v in units.values():
            for rater, score in v.items():
                others = [s for o, s in v.items() if o != rater and o in included]
                if others:
                    diffs[rater].append(score - float(np.mean(others)))
        out += [
            RaterBias(rater_id=r, criterion=criterion, bias=round(float(np.mean(d)), 4), units=len(d)) for r, d in sorted(diffs.items())
        ]
    return out
