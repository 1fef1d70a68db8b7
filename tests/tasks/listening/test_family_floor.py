"""Simulated p-values whose floor scales with the family: 15 MUSHRA candidates (105 pairs) can be told apart."""

from __future__ import annotations

import numpy as np

from voxledger.schemas.listening import Statistics
from voxledger.schemas.listening_receipts import AggregateResult, RatingRow
from voxledger.tasks.listening.report import summary_lines
from voxledger.tasks.listening.stats import MAX_RESAMPLES, family_resamples, floor_binds, paired_deltas

CANDIDATES = 15


def _rows(seed: int = 0) -> list[RatingRow]:
    """6 raters x 6 prompts, every rater scores every candidate on every prompt; candidate i sits 5 i points up."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(6):
        bias = rng.normal(0, 3)
        for p in range(6):
            for c in range(CANDIDATES):
                score = float(np.clip(np.round(20 + 5 * c + bias + rng.normal(0, 3)), 0, 100))
                rows.append(RatingRow.model_construct(rater_id=f"r{r}", stimulus=f"s{r}{p}{c}", trial="t", role="stimulus", task="mushra",
                                                      criterion="quality", candidate=f"c{c:02d}", prompt_id=f"p{p}", category="x",
                                                      score=score, audio_sha256="0" * 64, included=True))  # fmt: skip
    return rows


def test_fifteen_mushra_candidates_get_verdicts() -> None:
    deltas = paired_deltas(_rows(), Statistics(), {"quality": "higher_better"})
    assert len(deltas) == 105
    # before: 2,000 draws floor every p at 5e-4, and 105 x 5e-4 > 0.05: 0 of 105 verdicts
    verdicts = sum(d.better is not None for d in deltas)
    assert verdicts >= 90, verdicts  # 96: a few 5-point neighbours stay undecided at 6 x 6
    assert all(d.better == max(d.a, d.b) for d in deltas if d.better is not None)  # the higher-scored candidate, never the other
    need = family_resamples(2000, 105, 0.05)
    assert need == 20999
    assert {d.resamples for d in deltas if d.better is not None} == {need}
    lines = summary_lines(AggregateResult.model_construct(deltas=tuple(deltas), screening_scores=(), bradley_terry=(), agreement=(),
                                                          agreement_candidates_only=()))  # fmt: skip
    assert lines[1].startswith("p-value floor 1/(B+1) = 4.8e-05: B = 20,999 simulated data sets for the pairs that could pass")


def test_small_families_keep_the_protocol_count() -> None:
    assert family_resamples(2000, 6, 0.05) == 2000
    assert family_resamples(2000, 10_000, 0.05) == MAX_RESAMPLES
    assert floor_binds(2000, 105, 0.05) and not floor_binds(20999, 105, 0.05)
