"""Listening-test statistics over unblinded, screened rows.

- Means per (criterion, candidate) with rater-clustered bootstrap intervals: raters are resampled
  with replacement and all of a drawn rater's ratings come along (rater bias in TTS MOS can
  exceed 2 points, so resampling single ratings would make intervals far too narrow).
- Paired deltas ``b - a`` within (rater, prompt), same clustered bootstrap, Wilcoxon signed-rank
  test (scipy; exact for n <= 25 without ties or zeros, else the normal approximation with
  zeros dropped, as ``zero_method="wilcox"`` does). For A/B criteria the CMOS itself is the paired delta, oriented as b over a.
- Bradley-Terry strengths from A/B signs by Hunter's MM algorithm (ties count half to each).
- Krippendorff's alpha per criterion (``krippendorff``): ordinal for ACR/CMOS, interval for MUSHRA.
- Per-rater bias: mean of (own score - other raters' mean) over shared units.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from itertools import combinations

import krippendorff
import numpy as np
from scipy.stats import wilcoxon
from voxledger.schemas.listening import Statistics
from voxledger.schemas.listening_receipts import (
    Agreement,
    BradleyTerry,
    CandidateScore,
    PairedDelta,
    RaterBias,
    RatingRow,
)

SCORED_ROLES = ("stimulus", "hidden_reference", "low_anchor")


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


def clustered_ci(values: dict[str, list[float]], spec: Statistics, rng: np.random.Generator) -> tuple[float, float | None, float | None]:
    """Mean of all values and a percentile bootstrap interval resampling the clusters (raters)."""
    keys = sorted(values)
    sums = np.array([sum(values[k]) for k in keys])
    counts = np.array([len(values[k]) for k in keys])
    mean = float(sums.sum() / counts.sum())
    if len(keys) < 2:
        return mean, None, None
    draw = rng.integers(0, len(keys), size=(spec.bootstrap_resamples, len(keys)))
    boot = sums[draw].sum(axis=1) / counts[draw].sum(axis=1)
    tail = (1 - spec.confidence) / 2
    return mean, float(np.quantile(boot, tail)), float(np.quantile(boot, 1 - tail))


def candidate_scores(rows: list[RatingRow], spec: Statistics) -> list[CandidateScore]:
    """Mean and clustered interval per (criterion, candidate); for A/B the mean CMOS advantage."""
    groups: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.task == "ab" and r.versus_candidate:  # a CMOS credits B with +score and A with -score
            groups[(r.criterion, r.task, r.candidate)][r.rater_id].append(r.score)
            groups[(r.criterion, r.task, r.versus_candidate)][r.rater_id].append(-r.score)
        elif r.role in SCORED_ROLES:
            groups[(r.criterion, r.task, r.candidate)][r.rater_id].append(r.score)
    out = []
    for (criterion, task, cand), by_rater in sorted(groups.items()):
        mean, lo, hi = clustered_ci(by_rater, spec, np.random.default_rng(spec.seed))
        out.append(CandidateScore(criterion=criterion, task=task, candidate=cand, ratings=sum(map(len, by_rater.values())),  # type: ignore[arg-type]
                                  raters=len(by_rater), mean=_round(mean) or 0.0, ci_low=_round(lo), ci_high=_round(hi)))  # fmt: skip
    return out


def _paired(rows: list[RatingRow]) -> dict[tuple[str, str, str, str], dict[str, list[float]]]:
    """(criterion, task, a, b) -> rater -> deltas b - a."""
    out: dict[tuple[str, str, str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cells: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r.task == "ab" and r.versus_candidate:
            a, b = sorted((r.versus_candidate, r.candidate))
            out[(r.criterion, "ab", a, b)][r.rater_id].append(r.score if r.candidate == b else -r.score)
        elif r.role in SCORED_ROLES:
            cells[(r.criterion, r.task, r.rater_id, r.prompt_id)][r.candidate] = r.score
    for (criterion, task, rater, _), scores in cells.items():
        for a, b in combinations(sorted(scores), 2):
            out[(criterion, task, a, b)][rater].append(scores[b] - scores[a])
    return out


def paired_deltas(rows: list[RatingRow], spec: Statistics, directions: dict[str, str]) -> list[PairedDelta]:
    """Every candidate pair per criterion: mean delta, clustered interval, Wilcoxon test."""
    out = []
    for (criterion, task, a, b), by_rater in sorted(_paired(rows).items()):
        deltas = np.array([d for v in by_rater.values() for d in v])
        mean, lo, hi = clustered_ci(by_rater, spec, np.random.default_rng(spec.seed))
        stat = p = None
        if deltas.size and np.any(deltas != 0):
            exact = deltas.size <= 25 and np.all(deltas != 0) and np.unique(np.abs(deltas)).size == deltas.size
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                res = wilcoxon(deltas, method="exact" if exact else "approx")
            stat, p = _round(res.statistic), _round(res.pvalue)
        higher = b if lo is not None and lo > 0 else a if hi is not None and hi < 0 else None
        lower_better = task != "ab" and directions.get(criterion) == "lower_better"
        better = None if higher is None else ({a: b, b: a}[higher] if lower_better else higher)
        out.append(PairedDelta(criterion=criterion, task=task, a=a, b=b, pairs=int(deltas.size), mean_delta=_round(mean) or 0.0,  # type: ignore[arg-type]
                               ci_low=_round(lo), ci_high=_round(hi), wilcoxon_statistic=stat, p_value=p, better=better))  # fmt: skip
    return out


def bradley_terry(rows: list[RatingRow], criterion: str, spec: Statistics) -> BradleyTerry:
    """Strengths from the signs of A/B scores (B won if > 0), MM iterations until ``bt_tolerance``."""
    ab = [r for r in rows if r.task == "ab" and r.criterion == criterion and r.versus_candidate]
    names = sorted({c for r in ab for c in (r.candidate, r.versus_candidate or "")})
    idx = {n: i for i, n in enumerate(names)}
    wins = np.zeros((len(names), len(names)))
    for r in ab:
        b, a = idx[r.candidate], idx[r.versus_candidate or ""]
        wins[b, a] += 1.0 if r.score > 0 else 0.5 if r.score == 0 else 0.0
        wins[a, b] += 1.0 if r.score < 0 else 0.5 if r.score == 0 else 0.0
    games, total_wins = wins + wins.T, wins.sum(axis=1)
    p = np.full(len(names), 1.0 / max(1, len(names)))
    converged, it = False, 0
    for it in range(1, spec.bt_max_iterations + 1):
        denom = (games / (p[:, None] + p[None, :] + 1e-300)).sum(axis=1)
        new = np.where(denom > 0, total_wins / np.maximum(denom, 1e-300), p)
        new = new / new.sum() if new.sum() > 0 else p
        if np.max(np.abs(new - p)) < spec.bt_tolerance:
            converged, p = True, new
            break
        p = new
    return BradleyTerry(criterion=criterion, strengths={n: round(float(p[i]), 6) for n, i in idx.items()},
                        comparisons=len(ab), iterations=it, converged=converged)  # fmt: skip


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
    alpha = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
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
        out += [RaterBias(rater_id=r, criterion=criterion, bias=round(float(np.mean(d)), 4), units=len(d)) for r, d in sorted(diffs.items())]
    return out
