"""How an aggregate's statistics are shown (CLI, docs, dashboards): honest about what they can say.

- p-values in scientific notation; a value stored as 0 (below the stored precision) is shown as a
  bound, never as ``0.0``;
- a Bradley-Terry fit that does not exist (one side won every comparison, or a disconnected
  graph) is shown as not identifiable, never as strengths of 1.0 and 0.0;
- the MUSHRA hidden reference and low anchor are screening items: their means are shown as
  screening, never as candidates in a comparison (raters are told to score the reference 100);
- inter-rater agreement is labelled with what it counts: ``agreement`` includes the MUSHRA hidden
  reference and anchor (easy to agree on), ``agreement_candidates_only`` does not;
- a verdict that rests on suspicious raters (``robustness``) carries ``FLAGGED`` and its reasons on
  its own line, never printed as a plain verdict.
"""

from __future__ import annotations

from voxledger.schemas.listening_receipts import (
    AggregateResult,
    Agreement,
    BradleyTerry,
    CandidateScore,
    PairedDelta,
)
from voxledger.schemas.listening_robustness import Robustness, VerdictCheck
from voxledger.schemas.multiplicity import family_line, p_with_adjusted

P_VALUE_FLOOR = 5e-7  # stats stores p rounded to 6 decimals: a stored 0 means p < 5e-7


def format_p(p: float | None) -> str:
    """``p = 3.1e-04``, ``p < 5e-07`` for a stored zero, ``p n/a`` when there is none."""
    if p is None:
        return "p n/a"
    return f"p < {P_VALUE_FLOOR:.0e}" if p < P_VALUE_FLOOR else f"p = {p:.2e}"


def format_bradley_terry(bt: BradleyTerry) -> str:
    """One line per A/B criterion; strengths only when the fit exists."""
    strengths = bt.strengths or {}
    separable = any(v <= 1e-6 or v >= 1 - 1e-6 for v in strengths.values()) and len(strengths) > 1
    if not bt.identifiable or not strengths or separable:
        why = bt.note or "a candidate won or lost every comparison (separable data)"
        return f"{bt.criterion}: Bradley-Terry not identifiable ({why}); {bt.comparisons} comparisons"
    state = "converged" if bt.converged else f"not converged after {bt.iterations} iterations"
    ranked = ", ".join(f"{k} {v:.3f}" for k, v in sorted(strengths.items(), key=lambda kv: -kv[1]))
    return f"{bt.criterion}: Bradley-Terry {ranked} ({state}; {bt.comparisons} comparisons)"


def format_agreement(a: Agreement, *, candidates_only: bool) -> str:
    """Krippendorff's alpha with what it counts."""
    scope = "candidates only" if candidates_only else "incl. hidden reference and anchor" if a.level == "interval" else "all rated items"
    value = "n/a" if a.alpha is None else f"{a.alpha:.2f}"
    return f"{a.criterion}: alpha {value} ({a.level}, {scope}, {a.units} units)" + (f"; {a.note}" if a.note and a.alpha is None else "")


SCREENING_LABELS = {
    "hidden_reference": "hidden reference (screening: raters are told to score it 100)",
    "low_anchor": "low anchor (screening: a low-passed copy of the reference)",
    "mid_anchor": "mid anchor (screening: the reference low-passed at 7 kHz)",
}


def format_screening_score(s: CandidateScore) -> str:
    """The mean a MUSHRA screening item got, labelled as screening."""
    return f"{s.criterion}: {SCREENING_LABELS.get(s.candidate, s.candidate)} mean {s.mean:.1f} over {s.ratings} ratings"


def at_floor(d: PairedDelta) -> bool:
    """True when ``d``'s simulated p-value is the smallest its draws can give, 1 / (resamples + 1)."""
    return d.p_value is not None and d.resamples is not None and d.p_value <= round(1 / (d.resamples + 1), 6) + 1e-12


def floor_line(deltas: tuple[PairedDelta, ...], confidence: float) -> str:
    """What the simulated p-values' floor allows the family, stated when it binds or was raised for it."""
    tested = [d for d in deltas if d.resamples is not None and d.family_size]
    if not tested:
        return ""
    alpha, m, most = 1 - confidence, tested[0].family_size or 0, max(d.resamples or 0 for d in tested)
    floor = 1 / (most + 1)
    if m * floor >= alpha:
        return (
            f"p-value floor 1/(B+1) = {floor:.1e} with B = {most:,} simulated data sets: above Holm's first threshold "
            f"{alpha:g}/{m} = {alpha / m:.1e}, so no pair of this family can be called better; raise bootstrap_resamples"
        )
    if most > min(d.resamples or 0 for d in tested) or any(at_floor(d) for d in tested):
        return (
            f"p-value floor 1/(B+1) = {floor:.1e}: B = {most:,} simulated data sets for the pairs that could pass "
            f"(at least 10 x {m} tests / {alpha:g}), below Holm's first threshold {alpha / m:.1e}"
        )
    return ""


def flag_note(check: VerdictCheck | None) -> str:
    """`` FLAGGED: ...`` after a verdict that rests on suspicious raters; empty otherwise."""
    if check is None or not check.flagged:
        return ""
    return " FLAGGED: " + "; ".join(check.reasons)


def robustness_lines(rb: Robustness) -> list[str]:
    """Bot-flagged raters, the robust deltas and which raters each verdict depends on."""
    lines = []
    flagged = [s for s in rb.bot_scores if s.flagged]
    scored = [s for s in rb.bot_scores if s.p_value is not None]
    lines.append(
        f"bot score (signal-only predictors of the answers beyond the other raters', {rb.permutations:,} shuffles; "
        f"flag at {'Holm-adjusted ' * (rb.bot_adjustment == 'holm')}p <= {rb.bot_p_max:g} and |r| >= {rb.bot_r_min:g}): "
        + (
            ", ".join(f"{s.rater_id} FLAGGED (r {s.max_abs_r:.2f} with {s.best_predictor}, p {s.p_value:.1e})" for s in flagged)
            if flagged
            else f"no rater flagged ({len(scored)} of {len(rb.bot_scores)} scored)"
        )
    )
    if rb.suspects:
        lines.append(
            f"suspects (the {rb.suspects_max} lowest bot-score p, not flagged; every verdict recomputed without each subset of them, "
            f"so up to {rb.suspects_max} scripts whose answers follow a predictor are left out together): {', '.join(rb.suspects)}"
        )
    for d in rb.robust_deltas:
        ci = f" [{d.ci_low:+.3f}, {d.ci_high:+.3f}]" if d.ci_low is not None and d.ci_high is not None else ""
        p = f", p adj {d.p_adjusted:.2e}" if d.p_adjusted is not None else f", {d.note}" if d.note else ""
        lines.append(
            f"{d.criterion}: robust {d.b} - {d.a} = {d.estimate:+.3f}{ci} (20% trimmed mean of {d.raters} raters' means, "
            f"{d.trimmed} trimmed per end{p})" + (f", favours {d.better}" if d.better else "")
        )
    for v in rb.verdicts:
        if v.flipped_by:
            lines.append(
                f"{v.criterion}: {v.b} vs {v.a} verdict ({v.better or 'none'}) changes without any one of {', '.join(v.flipped_by)}"
            )
    lines.append(f"verdicts flagged as resting on suspicious raters: {rb.flagged_verdicts} of {len(rb.verdicts)}")
    return lines


def summary_lines(result: AggregateResult, confidence: float = 0.95) -> list[str]:
    """The statistics of an aggregate as printable lines (after the score table): the family the
    paired deltas were adjusted over and the floor of their simulated p-values where it matters,
    then each delta with its raw and adjusted p-value."""
    family = next((d for d in result.deltas if d.adjustment is not None), None)
    lines = []
    if family is not None:
        verdict = f"'favours' is said only where the adjusted p is below {1 - confidence:g} and the interval excludes 0"
        lines.append(family_line(family.adjustment, family.family, family.family_size, verdict))
        lines += [x for x in (floor_line(result.deltas, confidence),) if x]
    checks = {(v.criterion, v.task, v.a, v.b): v for v in result.robustness.verdicts} if result.robustness else {}
    lines += [
        f"{d.criterion}: {d.b} - {d.a} = {d.mean_delta:+.3f} over {d.pairs} pairs, {p_with_adjusted(d.p_value, d.p_adjusted, d.adjustment)}"
        + (f" (at the floor 1/({d.resamples:,}+1))" if at_floor(d) else "")
        + (f", favours {d.better}" if d.better else "")
        + flag_note(checks.get((d.criterion, d.task, d.a, d.b)))
        for d in result.deltas
    ]
    if result.robustness is not None:
        lines += robustness_lines(result.robustness)
    lines += [format_screening_score(s) for s in result.screening_scores]
    lines += [format_bradley_terry(bt) for bt in result.bradley_terry]
    lines += [format_agreement(a, candidates_only=False) for a in result.agreement]
    lines += [format_agreement(a, candidates_only=True) for a in result.agreement_candidates_only]
    return lines
