"""Listening-test statistics over unblinded, screened rows.

Raters and prompts are crossed: every rating shares a rater (bias in TTS MOS can exceed 2
points) and a prompt (some sentences are harder) with other ratings, so neither ratings nor
raters alone are independent. Every interval and test here is therefore clustered on both:

- Means per (criterion, candidate) and paired deltas ``b - a`` within (rater, prompt) with a
  two-way cluster-robust variance (Cameron, Gelbach & Miller 2011): V = V_rater + V_prompt -
  V_rater x prompt, each with the G / (G - 1) small-sample factor, max(V_rater, V_prompt) when the
  difference is not positive, and a t reference on min(raters, prompts) - 1 degrees of freedom;
  intervals stay inside the scale's range (logit-scale fallback), and the paired deltas of one
  aggregate are Holm-adjusted as one family before any candidate is called better.
  With fewer than ``MIN_RATERS`` raters or ``MIN_LISTENING_PROMPTS`` prompts, or no spread, the
  interval and test are reported as not estimable, and no candidate is called better. For A/B
  criteria the CMOS itself is the paired delta, oriented as b over a.
- Bradley-Terry strengths from A/B signs by Hunter's MM algorithm (ties count half), only when
  the maximum-likelihood estimate exists: a connected comparison graph whose win graph is
  strongly connected (Ford 1957); otherwise the strengths are reported as not identifiable.
- Krippendorff's alpha per criterion (``krippendorff``): ordinal for ACR/CMOS, interval for MUSHRA.
- Per-rater bias: mean of (own score - other raters' mean) over shared units.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

import krippendorff
import numpy as np
from scipy import stats
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
from voxledger.tasks.evaluation.intervals import REL_TOL, Bounds, adjust, bounded_t, delta_bounds, no_spread

SCORED_ROLES = ("stimulus", "hidden_reference", "low_anchor")  # rated on the scale (agreement, bias)
SCREENING_SCORED = ("hidden_reference", "low_anchor")  # MUSHRA screening items: never compared as candidates


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


@dataclass(frozen=True)
class CrossedEstimate:
    """A mean over ratings clustered on raters and prompts; bounds and test None when not estimable."""

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


def _cluster_var(resid: np.ndarray, groups: np.ndarray) -> float:
    """Cluster-robust variance of a mean for one grouping, with the G / (G - 1) factor."""
    _, inverse = np.unique(groups, return_inverse=True)
    sums = np.bincount(inverse, weights=resid)
    g = sums.size
    return float((sums**2).sum() / resid.size**2 * g / (g - 1)) if g > 1 else math.nan


def crossed_mean(
    values: list[float], raters: list[str], prompts: list[str], confidence: float, bounds: Bounds = (None, None)
) -> CrossedEstimate:
    """Mean of ``values`` with a two-way (rater x prompt) cluster-robust t interval and test of 0.

    The interval stays inside ``bounds`` (the scale's range, or a delta's): when the t interval
    crosses one, the logit-scale delta-method interval replaces it and ``fallback`` says so. A
    standard error at round-off level relative to the scores' magnitude counts as no spread.

    Raises:
        EvaluationError: the three lists differ in length, are empty, or a value is not finite.
    """
    if not (len(values) == len(raters) == len(prompts)):
        raise EvaluationError(
            f"{len(values)} values, {len(raters)} rater ids and {len(prompts)} prompt ids: pass one rater and one prompt per value"
        )
    if not values:
        raise EvaluationError("no ratings to summarise")
    y = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(y)):
        i = int(np.flatnonzero(~np.isfinite(y))[0])
        raise EvaluationError(f"rating {i} (rater {raters[i]!r}, prompt {prompts[i]!r}) is {values[i]}; scores must be finite")
    r, p = np.asarray(raters), np.asarray(prompts)
    n_r, n_p = len(set(raters)), len(set(prompts))
    est = CrossedEstimate(mean=float(y.mean()), n=y.size, raters=n_r, prompts=n_p)
    if n_r < MIN_RATERS or n_p < MIN_LISTENING_PROMPTS:
        return _with_note(
            est,
            f"{n_r} rater(s) x {n_p} prompt(s); the two-way clustered interval needs at least "
            f"{MIN_RATERS} raters and {MIN_LISTENING_PROMPTS} prompts",
        )
    resid = y - y.mean()
    v_r, v_p = _cluster_var(resid, r), _cluster_var(resid, p)
    v = v_r + v_p - _cluster_var(resid, np.char.add(np.char.add(r.astype(str), "\x1f"), p.astype(str)))
    v = v if v > 0 else max(v_r, v_p)
    scale = max((abs(b) for b in bounds if b is not None), default=0.0)
    if no_spread(y, scale) or not math.sqrt(max(v, 0.0)) > REL_TOL * max(scale, float(np.max(np.abs(y)))):
        return _with_note(est, f"all {y.size} values equal {y[0]:g} up to round-off: no spread, so no interval can be estimated")
    se, df = math.sqrt(v), min(n_r, n_p) - 1
    low, high, fell_back = bounded_t(est.mean, se, df, confidence, bounds)
    t = est.mean / se
    return CrossedEstimate(
        mean=est.mean,
        n=est.n,
        raters=n_r,
        prompts=n_p,
        low=low,
        high=high,
        t=t,
        df=df,
        p_value=float(2 * stats.t.sf(abs(t), df)),
        fallback=f"the t interval left the range [{bounds[0]:g}, {bounds[1]:g}]; logit-scale interval used" if fell_back else None,
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
        if r.task == "ab" and r.versus_candidate:  # a CMOS credits B with +score and A with -score
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
        e = crossed_mean(*_columns(cells), spec.confidence, _score_bounds(ranges, criterion, task))
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
        if r.task == "ab" and r.versus_candidate:
            a, b = sorted((r.versus_candidate, r.candidate))
            out[(r.criterion, "ab", a, b)].append((r.score if r.candidate == b else -r.score, r.rater_id, r.prompt_id))
        elif r.role == "stimulus":  # never against the hidden reference or the anchor: they are screening items
            cells[(r.criterion, r.task, r.rater_id, r.prompt_id)][r.candidate] = r.score
    for (criterion, task, rater, prompt), scores in cells.items():
        for a, b in combinations(sorted(scores), 2):
            out[(criterion, task, a, b)].append((scores[b] - scores[a], rater, prompt))
    return out


def paired_deltas(
    rows: list[RatingRow], spec: Statistics, directions: Mapping[str, str], ranges: Ranges | None = None
) -> list[PairedDelta]:
    """Every candidate pair per criterion: mean delta, crossed interval and t test.

    All pairs of one aggregate form one family: p-values are Holm-adjusted over it, and a
    candidate is called ``better`` only when its adjusted p-value is below 1 - confidence (and
    the interval agrees), so six pairs no longer give a one-in-four chance of a spurious verdict.
    """
    estimates = []
    for (criterion, task, a, b), cells in sorted(_paired(rows).items()):
        lo, hi = _score_bounds(ranges, criterion, task)
        bounds = delta_bounds((lo, hi)) if task != "ab" else (lo, hi)
        estimates.append(((criterion, task, a, b), crossed_mean(*_columns(cells), spec.confidence, bounds)))
    raw = [e.p_value for _, e in estimates if e.p_value is not None]
    adjusted = iter(adjust(raw, "holm"))
    alpha = 1 - spec.confidence
    out = []
    for (criterion, task, a, b), e in estimates:
        p_adj = next(adjusted) if e.p_value is not None else None
        higher = None
        if p_adj is not None and p_adj < alpha:
            higher = b if e.low is not None and e.low > 0 else a if e.high is not None and e.high < 0 else None
        lower_better = task != "ab" and directions.get(criterion) == "lower_better"
        better = None if higher is None else ({a: b, b: a}[higher] if lower_better else higher)
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
            )
        )
    return out


def win_matrix(rows: list[RatingRow], criterion: str) -> tuple[list[str], np.ndarray, int]:
    """Candidates, wins[i, j] (i beat j; a tie counts half to each) and the number of A/B comparisons."""
    ab = [r for r in rows if r.task == "ab" and r.criterion == criterion and r.versus_candidate]
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
        if r.task == "ab" and r.versus_candidate:
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
