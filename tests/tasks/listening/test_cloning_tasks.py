"""What voice-cloning listening tests add (issue 61): BS.1534-3's mid anchor, SMOS, familiarisation, completion, headphones."""

from __future__ import annotations

from tests.tasks.listening.test_stats import row
from voxledger.schemas.listening import ScreeningRules
from voxledger.tasks.listening.screening import screen_rater


def test_mid_anchor_rule_is_bs1534s_and_stands_beside_the_low_anchor_rule() -> None:
    rows = [row("r1", f"p{i}", "mid", 95 if i < 2 else 60, task="mushra", role="mid_anchor") for i in range(6)]
    rows += [row("r1", f"p{i}", "low", 20, task="mushra", role="low_anchor") for i in range(6)]
    verdict = screen_rater("r1", rows, {}, ScreeningRules(), None)  # 2 of 6 screens = 33% above 90: more than 15%
    assert not verdict.included and verdict.reasons == ("mushra_mid_anchor: mid anchor above 90 on 33% of screens (allowed 15%)",)
    assert verdict.mushra_mid_anchor_high_fraction == round(2 / 6, 6) and verdict.mushra_anchor_high_fraction == 0.0
    assert screen_rater("r1", rows, {}, ScreeningRules(mushra_anchor_max_fraction=0.4), None).included
