"""Conclusions that survive a minority of scripted raters: influence, a robust aggregate, bot scores.

Screening stops careless raters; a script that answers the screening items (a recogniser reads
spoken instructions, signal statistics find gold items) passes it and then rates the candidates
from the signal. Three measurements, recorded in the aggregate receipt (``result.robustness``):

- **Bot score per rater.** Signal-only predictors of every rated file (the leak check's level,
  crest, band-energy, pause-floor, onset and quiet-frame measures, and librosa's spectral flatness,
  flux, roll-off and centroid; where the stimuli came from an evaluation recorded in this home, the
  source clip's metrics, Whisper WER among them, read from the catalog at no cost) explain how much
  of the rater's answers *beyond the other raters'* for the same unit (criterion x candidate x
  prompt) and the same condition (criterion x candidate; for A/B the pair, B minus A): what an
  honest rater shares with the others is removed, a script that follows a signal statistic keeps
  it. The statistic is the highest |correlation| over predictors between the residuals of the
  answers and of the predictor (both regressed on the others' medians within each criterion); its
  null permutes the answers' residuals within criterion (Freedman & Lane 1983; own seeded
  generator). A rater is flagged when the p, Holm-adjusted over every scored rater of the
  aggregate, is at most ``BOT_ALPHA`` (so at most a 1 in 100 chance that any honest rater of the
  set is flagged) and |r| >= ``BOT_R_MIN``.
- **Suspects.** The ``SUSPECTS_MAX`` included raters with the lowest bot-score p: ranked, not
  flagged; verdicts are recomputed without each subset of them that leaves ``MIN_RATERS``. Scripts rank high long before
  their p survives the family-wise bound (about 24 ratings per rater).
- **Robust aggregate.** Per paired delta, each rater's mean delta, then the 20% trimmed mean over
  raters with Yuen's (1974) one-sample test and interval, Holm-adjusted over the aggregate's
  robust deltas (``RobustDelta``). A rater whose answers sit far from the others' is trimmed,
  whatever their size.
- **Influence.** Each verdict (a paired delta's ``better``) recomputed with each included rater
  left out, with every bot-flagged rater left out, and without each non-empty subset of the suspects.

A verdict is flagged (``VerdictCheck.flagged``) when a flagged rater's removal changes it, removing
every flagged rater changes it, removing some of the suspects gives a verdict for another candidate
or one where there was none (fewer raters losing significance is expected and not flagged), or the
plain and robust aggregates disagree (the robust estimate does not point the plain verdict's way,
or the robust test favours a candidate the plain one does not). Limits are stated in
docs/listening.md: a script whose answers follow none of the predictors is not ranked high, more
scripts than suspects are not all removed, and no method survives a majority of scripts.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping
from itertools import combinations
from typing import Final

import numpy as np

from voxledger.schemas.listening import MIN_RATERS, Statistics, TaskType
from voxledger.schemas.listening_receipts import PairedDelta, RatingRow
from voxledger.schemas.listening_robustness import RaterBotScore, RobustDelta, Robustness, VerdictCheck
from voxledger.tasks.evaluation.intervals import adjust
from voxledger.tasks.listening import stats
from voxledger.tasks.listening.predictors import Features

PERMUTATIONS: Final = 2000
"""Shuffles per rater, at least; more where the set has so many raters that Holm's first bound needs them."""
BOT_ALPHA: Final = 0.01
"""Family-wise level: Holm over every scored rater of an aggregate, so an honest set has a flagged rater at most 1 time in 100."""
SUSPECTS_MAX: Final = 3
"""Suspects per aggregate; at most 2**3 - 1 = 7 subsets of them removed (those leaving ``MIN_RATERS``).
Three: on the 8-rater simulation the second of two scripts, where it passed screening, ranked within the top three
by bot score in 23 of 25 seeds, within the top two in 14 (docs/listening.md)."""
BOT_R_MIN: Final = 0.6
"""A flagged rater's answers also share at least a third of their variance beyond the others' with a predictor."""
TRIM: Final = 0.2
SUBSET_SIZE: Final = 1
"""Predictors per fit. Pairs fit bot.py's mix of flatness and flux better, but the maximum over 78 pairs under
shuffling rises more: on 24-26 ratings per rater one predictor found the bot at lower p (docs/listening.md)."""
MIN_CONTRASTS: Final = 4
"""Ratings with a within-condition contrast a bot score needs (fewer: not scored, said in ``note``)."""


def _rater_seed(seed: int, rater: str) -> np.random.Generator:
    return np.random.default_rng([seed, int.from_bytes(hashlib.sha256(rater.encode()).digest()[:4], "big")])


Contrast = tuple[tuple[str, ...], float, dict[str, float]]  # (condition + prompt, score on a unit scale, predictors)


def contrasts(
    rows: list[RatingRow], features: Features, versus: Mapping[tuple[str, str], str], ranges: Mapping[str, tuple[float, float]]
) -> list[Contrast]:
    """One entry per candidate rating with features: A/B as B minus A, oriented by the sorted pair; scores divided by the scale's span."""
    out: list[Contrast] = []
    for r in rows:
        if r.role != "stimulus" or r.stimulus not in features:
            continue
        lo, hi = ranges.get(r.criterion, (0.0, 1.0))
        span = (hi - lo) or 1.0
        if r.task == "ab" and r.versus_candidate:
            other = versus.get((r.rater_id, r.trial))
            if other not in features:
                continue
            sign = 1.0 if r.candidate >= r.versus_candidate else -1.0  # b - a with a, b sorted
            pair = tuple(sorted((r.candidate, r.versus_candidate)))
            diff = {k: sign * (v - features[str(other)][k]) for k, v in features[r.stimulus].items()}
            out.append(((r.criterion, "ab", *pair, r.prompt_id), sign * r.score / span, diff))
        else:
            out.append(((r.criterion, r.task, r.candidate, r.prompt_id), r.score / span, features[r.stimulus]))
    return out


Agreed = dict[tuple[str, ...], tuple[float, float]]  # unit -> (the others' median for the unit, for its condition)


def consensus(by_rater: Mapping[str, list[Contrast]], raters: set[str]) -> dict[str, Agreed]:
    """Per rater and rated unit (condition and prompt): the median over the other raters in ``raters`` of their
    mean score of the same unit (of the same condition over every prompt when no other rater rated that unit),
    and the median of their mean score of the unit's condition over every prompt.

    The unit's mean carries what every listener hears in that prompt (a hard sentence), which the
    signal of its files also varies with. The condition's mean, over more ratings, carries the
    candidate's quality where few others heard the unit: without it an honest rater's answers keep
    the quality the noisy unit median misses, and so follow whatever signal tells candidates apart."""
    units: dict[tuple[str, ...], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rater, items in by_rater.items():
        for unit, y, _ in items:
            units[unit][rater].append(y)
            units[unit[:-1]][rater].append(y)

    def others(key: tuple[str, ...], rater: str) -> list[float]:
        return [float(np.mean(v)) for o, v in units.get(key, {}).items() if o != rater and o in raters]

    out: dict[str, Agreed] = {}
    for rater, items in by_rater.items():
        mine = {}
        for unit, _, _ in items:
            condition = others(unit[:-1], rater)
            if condition:  # the median: one script among the others moves it little
                mine[unit] = (float(np.median(others(unit, rater) or condition)), float(np.median(condition)))
        out[rater] = mine
    return out


def _varying(zb: np.ndarray) -> np.ndarray:
    """The intercept and the columns of ``zb`` that vary within the block."""
    return zb[:, [0, *(j for j in range(1, zb.shape[1]) if np.ptp(zb[:, j]) > 1e-12)]]


def _residualise(blocks: list[np.ndarray], z: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v`` (items x columns) minus its least-squares fit on ``z`` (intercept and consensus columns) within each block."""
    out = np.empty_like(v)
    for b in blocks:
        zb = _varying(z[b])
        coef, *_ = np.linalg.lstsq(zb, v[b], rcond=None)
        out[b] = v[b] - zb @ coef
    return out


def _bases(xr: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Every subset of at most ``SUBSET_SIZE`` predictor columns with an orthonormal basis of its span (subsets x items x size)."""
    subsets, bases = [], []
    usable = [i for i in range(xr.shape[1]) if np.linalg.norm(xr[:, i]) > 1e-12]
    for size in range(1, SUBSET_SIZE + 1):
        for subset in combinations(usable, size):
            q, r = np.linalg.qr(xr[:, subset])
            if np.min(np.abs(np.diag(r))) < 1e-9 * max(1.0, float(np.abs(r).max())):
                continue  # collinear: the smaller subsets already cover it
            subsets.append(subset)
            bases.append(np.pad(q, ((0, 0), (0, SUBSET_SIZE - size))))
    return subsets, np.array(bases)


def local_blocks(blocks: list[np.ndarray]) -> list[np.ndarray]:
    """Positions of each block's items once the blocks are concatenated."""
    starts = np.cumsum([0, *(b.size for b in blocks[:-1])])
    return [np.arange(start, start + b.size) for start, b in zip(starts, blocks, strict=True)]


def _fit(e: np.ndarray, bases: np.ndarray) -> np.ndarray:
    """Multiple correlation of each row of ``e`` (draws x items) with each subset's span (draws x subsets)."""
    projected = np.einsum("di,sik->dsk", e, bases)
    out: np.ndarray = np.sqrt(np.sum(projected**2, axis=2)) / np.maximum(np.linalg.norm(e, axis=1), 1e-12)[:, None]
    return out


def bot_score(
    rater: str,
    items: list[Contrast],
    agreed: Mapping[tuple[str, ...], tuple[float, float]],
    *,
    included: bool,
    seed: int = 0,
    permutations: int = PERMUTATIONS,
) -> RaterBotScore:
    """The bot score of one rater (module docstring).

    Per criterion, the rater's scores and each predictor (as ranks) are regressed on the other raters'
    medians for the same unit and condition (``agreed``, from ``consensus``); the statistic is the highest |correlation| between the
    two residuals over predictors: what the signal explains of the answers beyond what the others
    heard. Its null permutes the residuals of the scores within each criterion (Freedman & Lane 1983).
    ``flagged`` is left False: ``assess`` flags after adjusting the p over every rater (``flag``).
    """
    from scipy.stats import rankdata

    kept = [(cond, y, x) for cond, y, x in items if cond in agreed]
    names = sorted({k for _, _, x in kept for k in x})
    empty = RaterBotScore(
        rater_id=rater, included=included, ratings=len(kept), best_predictor=None, max_abs_r=None, p_value=None, flagged=False
    )
    criteria = sorted({cond[0] for cond, _, _ in kept})
    blocks = [np.array([i for i, (cond, _, _) in enumerate(kept) if cond[0] == c]) for c in criteria]
    blocks = [b for b in blocks if b.size >= 3]
    n = sum(b.size for b in blocks)
    if n - 2 * len(blocks) < MIN_CONTRASTS or not names:
        return empty.model_copy(
            update={"note": f"{n} ratings against {len(blocks)} criteria; at least {MIN_CONTRASTS} residual degrees of freedom needed"}
        )
    y = np.array([v for _, v, _ in kept])
    z = np.column_stack([np.ones(len(kept)), [agreed[cond] for cond, _, _ in kept]])  # intercept, unit, condition
    x = np.array([[f.get(k, 0.0) for k in names] for _, _, f in kept])
    for b in blocks:  # predictors as ranks within a criterion: robust to one wild value
        x[b] = rankdata(x[b], axis=0)
    index = np.concatenate(blocks)
    e = _residualise(blocks, z, y[:, None])[index, 0]
    xr = _residualise(blocks, z, x)[index]
    if float(np.linalg.norm(e)) < 1e-12 * max(1.0, float(np.linalg.norm(y))):
        return empty.model_copy(update={"note": "the answers follow the other raters exactly: nothing for a predictor to explain"})
    local = local_blocks(blocks)
    subsets, bases = _bases(xr)
    rng = _rater_seed(seed, rater)
    shuffled = np.empty((permutations, n))
    for part in local:  # permute the residuals within each criterion, then residualise again
        shuffled[:, part] = e[part][np.argsort(rng.random((permutations, part.size)), axis=1)]
    zl = z[index]
    for part in local:
        zb = _varying(zl[part])
        shuffled[:, part] -= (zb @ np.linalg.lstsq(zb, shuffled[:, part].T, rcond=None)[0]).T
    fits = _fit(e[None, :], bases)[0]
    best = int(np.argmax(fits))
    null = np.max(_fit(shuffled, bases), axis=1)
    observed = float(fits[best])
    p = float((1 + np.sum(null >= observed - 1e-12)) / (permutations + 1))
    return RaterBotScore(
        rater_id=rater,
        included=included,
        ratings=n,
        best_predictor=" + ".join(names[i] for i in subsets[best]),
        max_abs_r=round(observed, 4),
        p_value=round(p, 6),
        flagged=False,
    )


def flag(scores: list[RaterBotScore]) -> list[RaterBotScore]:
    """``scores`` with ``p_adjusted`` (Holm over every scored rater) and ``flagged`` (adjusted p <= ``BOT_ALPHA`` and
    |r| >= ``BOT_R_MIN``) set."""
    scored = [s for s in scores if s.p_value is not None]
    adjusted = dict(zip((s.rater_id for s in scored), adjust([s.p_value or 0.0 for s in scored], "holm"), strict=True))
    out = []
    for s in scores:
        p = adjusted.get(s.rater_id)
        hit = p is not None and p <= BOT_ALPHA and (s.max_abs_r or 0.0) >= BOT_R_MIN
        out.append(s.model_copy(update={"p_adjusted": None if p is None else round(p, 6), "flagged": hit}))
    return out


def suspects(scores: list[RaterBotScore]) -> tuple[str, ...]:
    """The ``SUSPECTS_MAX`` included raters with the lowest bot-score p (then the highest |r|)."""
    ranked = sorted((s.p_value, -(s.max_abs_r or 0.0), s.rater_id) for s in scores if s.included and s.p_value is not None)
    return tuple(rater for _, _, rater in ranked[:SUSPECTS_MAX])


def yuen(values: list[float], confidence: float, trim: float = TRIM) -> tuple[float, float | None, float | None, float | None, int]:
    """(trimmed mean, interval low, high, two-sided p of 0, raters trimmed per end) by Yuen's one-sample test.

    Wilcox's ``trimci`` (Introduction to Robust Estimation and Hypothesis Testing, 3rd ed., 4.4.3):
    g = floor(trim x n) values cut from each end, standard error s_w / ((1 - 2 trim) sqrt(n)) with s_w
    the winsorised standard deviation (ddof 1), t on n - 2g - 1 degrees of freedom. Interval and p
    are None with no spread or fewer than two values kept.
    """
    from scipy import stats as sps
    from scipy.stats import mstats

    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    g = int(np.floor(trim * n))
    h = n - 2 * g
    est = float(x[g : n - g].mean())
    wins = np.asarray(mstats.winsorize(x, limits=(g / n, g / n)), dtype=float) if g else x
    s_w = float(np.std(wins, ddof=1)) if n > 1 else 0.0
    if h < 2 or s_w <= 1e-9 * max(1.0, abs(est)):
        return est, None, None, None, g
    se = s_w / ((1 - 2 * trim) * np.sqrt(n))
    q = float(sps.t.ppf(0.5 + confidence / 2, h - 1))
    p = float(2 * sps.t.sf(abs(est) / se, h - 1))
    return est, est - q * se, est + q * se, p, g


def robust_deltas(rows: list[RatingRow], spec: Statistics, directions: Mapping[str, str]) -> list[RobustDelta]:
    """Every candidate pair's robust delta (``RobustMethod``), Holm-adjusted as one family."""
    alpha = 1 - spec.confidence
    found: list[tuple[tuple[str, TaskType, str, str], float, float | None, float | None, float | None, int, int, str | None]] = []
    for (criterion, task, a, b), cells in sorted(stats.paired_cells(rows).items()):
        by_rater: dict[str, list[float]] = defaultdict(list)
        for value, rater, _ in cells:
            by_rater[rater].append(value)
        means = [float(np.mean(v)) for _, v in sorted(by_rater.items())]
        if len(means) < MIN_RATERS:
            found.append(
                ((criterion, task, a, b), float(np.mean(means)), None, None, None, 0, len(means), f"fewer than {MIN_RATERS} raters")
            )
            continue
        est, low, high, p, g = yuen(means, spec.confidence)
        found.append(((criterion, task, a, b), est, low, high, p, g, len(means), None if p is not None else "no spread between raters"))
    adjusted = iter(adjust([f[4] for f in found if f[4] is not None], "holm"))
    out = []
    for (criterion, task, a, b), est, low, high, p, g, n, note in found:
        p_adj = next(adjusted) if p is not None else None
        lower_better = task != "ab" and directions.get(criterion) == "lower_better"
        better = stats.better_of(a, b, low, high, p_adj, alpha, lower_better=lower_better)
        out.append(
            RobustDelta(
                criterion=criterion,
                task=task,
                a=a,
                b=b,
                raters=n,
                trimmed=g,
                estimate=round(est, 6),
                ci_low=None if low is None else round(low, 6),
                ci_high=None if high is None else round(high, 6),
                p_value=None if p is None else round(p, 6),
                p_adjusted=None if p_adj is None else round(p_adj, 6),
                better=better,
                note=note,
            )
        )
    return out


Verdict = tuple[str, str, str, str]  # criterion, task, a, b


def _verdicts(deltas: list[PairedDelta]) -> dict[Verdict, str | None]:
    return {(d.criterion, d.task, d.a, d.b): d.better for d in deltas}


def _supports(d: PairedDelta, r: RobustDelta, directions: Mapping[str, str]) -> bool:
    """Whether the robust estimate points the plain verdict's way."""
    if d.better is None:
        return True
    toward_b = d.better == d.b
    if d.task != "ab" and directions.get(d.criterion) == "lower_better":
        toward_b = not toward_b
    return r.estimate > 0 if toward_b else r.estimate < 0


def assess(
    rows: list[RatingRow],
    plain: list[PairedDelta],
    included: set[str],
    spec: Statistics,
    directions: Mapping[str, str],
    ranges: Mapping[str, tuple[float, float]],
    features: Features,
    versus: Mapping[tuple[str, str], str],
) -> Robustness:
    """Bot scores of every rater in ``rows``, robust deltas and the influence of each included rater on ``plain``'s verdicts.

    ``rows`` holds every accepted rater's rows (``included`` marks who screening kept); ``plain`` are
    the paired deltas computed from the included raters' rows.
    """
    by_rater: dict[str, list[RatingRow]] = defaultdict(list)
    for r in rows:
        by_rater[r.rater_id].append(r)
    items = {rater: contrasts(mine, features, versus, ranges) for rater, mine in sorted(by_rater.items())}
    agreed = consensus(items, included)
    shuffles = max(PERMUTATIONS, 2 * int(np.ceil(len(items) / BOT_ALPHA)))  # Holm's first bound is BOT_ALPHA / raters
    scores = flag(
        [
            bot_score(rater, mine, agreed[rater], included=rater in included, seed=spec.seed, permutations=shuffles)
            for rater, mine in items.items()
        ]
    )
    flagged = tuple(s.rater_id for s in scores if s.flagged and s.included)
    suspected = suspects(scores)
    kept = [r for r in rows if r.rater_id in included]
    robust = robust_deltas(kept, spec, directions)
    robust_by = {(d.criterion, d.task, d.a, d.b): d for d in robust}
    base = _verdicts(plain)

    def leaving(out: set[str]) -> dict[Verdict, str | None]:
        return _verdicts(stats.paired_deltas([r for r in kept if r.rater_id not in out], spec, directions, ranges))

    without = {rater: leaving({rater}) for rater in sorted(included)}
    no_flagged = leaving(set(flagged)) if flagged else {}
    room = min(len(suspected), len(included) - MIN_RATERS)  # removing more leaves too few raters for any verdict
    subsets = [c for size in range(1, room + 1) for c in combinations(suspected, size)]
    no_suspects = {c: without[c[0]] if len(c) == 1 else leaving(set(c)) for c in subsets}
    checks = []
    for d in plain:
        key = (d.criterion, d.task, d.a, d.b)
        flips = tuple(rater for rater, v in without.items() if v.get(key) != base[key])
        rd = robust_by.get(key)
        reasons = [f"removing bot-flagged rater {rater} changes it" for rater in flips if rater in flagged]
        if len(flagged) > 1 and no_flagged.get(key) != base[key]:  # one flagged rater: the line above says it
            reasons.append(f"removing every bot-flagged rater ({', '.join(flagged)}) gives {no_flagged.get(key) or 'no verdict'}")
        for c, v in no_suspects.items():  # another verdict with fewer raters: not a loss of power
            if v.get(key) is not None and v.get(key) != base[key]:
                reasons.append(f"removing suspect{'s' * (len(c) > 1)} {', '.join(c)} (highest bot scores) gives {v.get(key)}")
                break
        if rd is not None and not _supports(d, rd, directions):
            reasons.append(f"the robust estimate {rd.estimate:+.3f} does not favour {d.better}")
        if rd is not None and rd.better is not None and rd.better != d.better:
            reasons.append(f"the robust aggregate favours {rd.better}")
        checks.append(
            VerdictCheck(
                criterion=d.criterion,
                task=d.task,
                a=d.a,
                b=d.b,
                better=d.better,
                robust_better=rd.better if rd else None,
                flipped_by=flips,
                without_flagged=no_flagged.get(key) if flagged else None,
                flagged=bool(reasons),
                reasons=tuple(reasons),
            )
        )
    return Robustness(
        predictors=tuple(sorted({k for f in features.values() for k in f})),
        permutations=shuffles,
        bot_p_max=BOT_ALPHA,
        bot_adjustment="holm",
        bot_r_min=BOT_R_MIN,
        trim=TRIM,
        bot_scores=tuple(scores),
        robust_deltas=tuple(robust),
        verdicts=tuple(checks),
        flagged_raters=flagged,
        flagged_verdicts=sum(c.flagged for c in checks),
        suspects=suspected,
        suspects_max=SUSPECTS_MAX,
    )
