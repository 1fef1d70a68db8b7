"""Statistics are shown honestly: p-values, Bradley-Terry identifiability, what agreement counts."""

from __future__ import annotations

from voxledger.schemas.listening_receipts import Agreement, BradleyTerry
from voxledger.tasks.listening.report import format_agreement, format_bradley_terry, format_p


def test_p_values_in_scientific_notation_and_never_zero() -> None:
    assert format_p(0.0) == "p < 5e-07"  # landed output printed 0.0
    assert format_p(3.1234e-4) == "p = 3.12e-04" and format_p(None) == "p n/a"


def test_separable_bradley_terry_is_not_reported_as_converged() -> None:
    separable = BradleyTerry(criterion="preference", strengths={"adapter": 1.0, "base": 0.0}, comparisons=18, iterations=3, converged=True)
    assert format_bradley_terry(separable).startswith(
        "preference: Bradley-Terry not identifiable (a candidate won or lost every comparison"
    )
    fitted = BradleyTerry(criterion="preference", strengths={"a": 0.7, "b": 0.3}, comparisons=18, iterations=40, converged=True)
    assert format_bradley_terry(fitted) == "preference: Bradley-Terry a 0.700, b 0.300 (converged; 18 comparisons)"


def test_agreement_says_what_it_counts() -> None:
    a = Agreement(criterion="quality", level="interval", alpha=0.94, units=30)
    assert format_agreement(a, candidates_only=False) == "quality: alpha 0.94 (interval, incl. hidden reference and anchor, 30 units)"
    assert (
        format_agreement(a.model_copy(update={"alpha": 0.57, "units": 18}), candidates_only=True)
        == "quality: alpha 0.57 (interval, candidates only, 18 units)"
    )
