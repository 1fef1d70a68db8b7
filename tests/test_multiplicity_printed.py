"""Every printed p-value carries its adjusted value, and every table of them names its family and adjustment."""

from __future__ import annotations

import inspect

from voxledger.dashboards import decisions
from voxledger.schemas.evaluation import PairedTest
from voxledger.schemas.listening_receipts import AggregateResult, PairedDelta
from voxledger.schemas.multiplicity import family_line, p_with_adjusted
from voxledger.tasks.listening.report import summary_lines

FAMILY = "every paired delta of this aggregate"


def _delta(a: str, b: str, p: float, p_adj: float, better: str | None) -> PairedDelta:
    return PairedDelta(criterion="quality", task="mushra", a=a, b=b, pairs=60, mean_delta=5.0, ci_low=1.0, ci_high=9.0, p_value=p,
                       better=better, p_adjusted=p_adj, adjustment="holm", family=FAMILY, family_size=3)  # fmt: skip


def test_ratings_aggregate_lines_state_family_adjustment_and_adjusted_p() -> None:
    deltas = (_delta("a", "b", 0.004, 0.012, "b"), _delta("a", "c", 0.03, 0.06, None), _delta("b", "c", 0.2, 0.2, None))
    result = AggregateResult.model_construct(
        deltas=deltas, scores=(), screening_scores=(), bradley_terry=(), agreement=(), agreement_candidates_only=()
    )
    lines = summary_lines(result)
    assert lines[0].startswith(f"p-values adjusted by Holm (familywise error) over the family '{FAMILY}': 3 test(s)")
    # the raw p of 0.03 reads as significant alone; its Holm-adjusted 0.06 is what the verdict read
    assert "quality: c - a = +5.000 over 60 pairs, p 3.00e-02, Holm-adjusted 6.00e-02" in lines
    assert "quality: b - a = +5.000 over 60 pairs, p 4.00e-03, Holm-adjusted 1.20e-02, favours b" in lines


def test_dashboard_comparison_cells_show_the_adjusted_p() -> None:
    test = PairedTest(
        method="cluster_t", units=20, statistic=2.3, p_value=0.03, p_adjusted=0.27, adjustment="holm", family="f", family_size=9
    )
    assert decisions._p(test, []) == "p 3.00e-02, Holm-adjusted 2.70e-01"
    assert "family_line" in inspect.getsource(decisions.forest)  # the table is followed by its family line


def test_promotion_views_state_the_round_error_control() -> None:
    from voxledger.cli import promote as promote_module

    assert "error_control" in inspect.getsource(decisions.promotion)
    assert "error_control" in inspect.getsource(promote_module.promote.callback)  # type: ignore[union-attr]


def test_formatting_never_prints_a_stored_zero_or_a_bare_p() -> None:
    assert p_with_adjusted(0.0, 0.0, "holm") == "p < 5e-07, Holm-adjusted < 5e-07"
    assert p_with_adjusted(0.01, None, None) == "p 1.00e-02 (unadjusted: in no family)"
    assert p_with_adjusted(0.01, 0.04, "fdr_bh") == "p 1.00e-02, Benjamini-Hochberg-adjusted 4.00e-02"
    assert family_line(None, None, None) == ""
