"""Post-screening of raters under versioned rules (recorded in the aggregate receipt).

Rules of ``voxledger.screening/1``:
- ``mushra_reference``: exclude a rater who scored the MUSHRA hidden reference below
  ``mushra_reference_min`` on more than ``mushra_reference_max_fraction`` of their screens
  (ITU-R BS.1534-3 post-screening).
- ``mushra_mid_anchor``: exclude a rater who scored the mid-range (7 kHz) anchor above
  ``mushra_anchor_max`` on more than ``mushra_anchor_max_fraction`` of their screens (BS.1534-3).
- ``mushra_anchor``: the same bound on its own for the 3.5 kHz low-range anchor, which a listening
  rater rates lower still, so a high score on it is the stronger sign of not listening.
- ``gold``: exclude a rater with more than ``gold_max_failures`` gold answers outside
  ``+-gold_tolerance`` of the known answer (ITU-T P.808 gold questions). ACR gold items and A/B
  comparison gold items (``design.comparison_gold_items``: the reference against its scrambled
  copy, the known answer the scale's end on B) count together.
- ``attention``: exclude a rater with more than ``attention_max_failures`` wrong attention checks.
- ``variance``: exclude a rater whose ACR stimulus ratings have a population variance (ddof = 0,
  ``numpy.var``) below ``min_rating_variance`` (P.808: a rater giving (nearly) the same score to
  everything is not listening). Gold, attention, reference and anchor items are not counted.

Gold and attention items are built so a script cannot answer them from the signal (spoken
instructions drawn per item, a scrambled reference as the degraded gold item, and as the other
side of an A/B gold trial whose two files share spectrum, loudness and length:
``instructions.py``); the MUSHRA rules screen careless listeners, not scripts (the anchor and
hidden reference are easy to find by design).
"""

from __future__ import annotations

import numpy as np

from voxledger.schemas.listening import ScreeningRules
from voxledger.schemas.listening_receipts import RaterScreening, RatingRow


def screen_rater(
    rater_id: str, rows: list[RatingRow], expected: dict[str, int | None], rules: ScreeningRules, check_criterion: str | None
) -> RaterScreening:
    """Apply every rule to one rater's accepted rows; ``expected`` maps pseudonym -> known answer."""
    reasons: list[str] = []
    gold = [r for r in rows if r.role == "gold" and (r.criterion == check_criterion or r.task == "ab")]  # ACR and A/B gold
    gold_fail = sum(abs(r.score - (expected[r.stimulus] or 0)) > rules.gold_tolerance for r in gold)
    if gold_fail > rules.gold_max_failures:
        reasons.append(
            f"gold: {gold_fail} of {len(gold)} gold answers outside +-{rules.gold_tolerance} (allowed {rules.gold_max_failures})"
        )
    attention = [r for r in rows if r.role == "attention"]
    att_fail = sum(r.score != expected[r.stimulus] for r in attention)
    if att_fail > rules.attention_max_failures:
        reasons.append(
            f"attention: {att_fail} of {len(attention)} attention checks answered wrongly (allowed {rules.attention_max_failures})"
        )
    acr = [r.score for r in rows if r.task == "acr" and r.role == "stimulus"]
    variance = float(np.var(acr, ddof=0)) if len(acr) >= 2 else None
    if variance is not None and variance < rules.min_rating_variance:
        reasons.append(f"variance: ACR rating variance {variance:.3f} below {rules.min_rating_variance}")
    refs = [r.score for r in rows if r.role == "hidden_reference"]
    low = sum(s < rules.mushra_reference_min for s in refs) / len(refs) if refs else None
    if low is not None and low > rules.mushra_reference_max_fraction:
        reasons.append(
            f"mushra_reference: hidden reference below {rules.mushra_reference_min:g} on {low:.0%} of screens "
            f"(allowed {rules.mushra_reference_max_fraction:.0%})"
        )
    high = _anchor_rule(rows, "low_anchor", "mushra_anchor: low anchor", rules, reasons)
    mid_high = _anchor_rule(rows, "mid_anchor", "mushra_mid_anchor: mid anchor", rules, reasons)
    return RaterScreening(
        rater_id=rater_id,
        included=not reasons,
        reasons=tuple(reasons),
        gold_failures=gold_fail,
        attention_failures=att_fail,
        rating_variance=None if variance is None else round(variance, 6),
        mushra_reference_low_fraction=None if low is None else round(low, 6),
        mushra_anchor_high_fraction=None if high is None else round(high, 6),
        mushra_mid_anchor_high_fraction=None if mid_high is None else round(mid_high, 6),
    )


def _anchor_rule(rows: list[RatingRow], role: str, what: str, rules: ScreeningRules, reasons: list[str]) -> float | None:
    """Share of the rater's screens with this anchor above ``mushra_anchor_max`` (None: no such anchor); adds the reason."""
    scores = [r.score for r in rows if r.role == role]
    if not scores:
        return None
    high = sum(s > rules.mushra_anchor_max for s in scores) / len(scores)
    if high > rules.mushra_anchor_max_fraction:
        reasons.append(
            f"{what} above {rules.mushra_anchor_max:g} on {high:.0%} of screens (allowed {rules.mushra_anchor_max_fraction:.0%})"
        )
    return high
