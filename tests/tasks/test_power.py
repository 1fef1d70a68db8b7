"""``plan power``: the less favourable pilot candidate, ordinary and catastrophic pilots, the policy's challengers."""

from __future__ import annotations

import numpy as np
import pytest

from voxledger.schemas.promotion import GateRule, PromotionPolicy
from voxledger.tasks.corpus.demo_plans import plans
from voxledger.tasks.evaluation.catastrophic import challengers_of
from voxledger.tasks.power import PilotDeltas, power_warning, round_confidence, rule_power

CONF3 = round_confidence(0.95, 3)
WER_HIGH = GateRule(metric="wer:basic", statistic="delta_high", op="<=", threshold=0.15)


def _pilot(name: str, effect: float, sd: float = 0.24, new_failure_rate: float = 0.0, seed: int = 0) -> PilotDeltas:
    deltas = np.random.default_rng(seed).normal(0, 1, 20)
    deltas = effect + sd * (deltas - deltas.mean()) / deltas.std(ddof=1)  # exactly this mean and sd
    return PilotDeltas(name, "wer:basic", deltas, 1, None, new_failure_rate)


def test_the_less_favourable_of_two_pilot_candidates_is_taken_and_named() -> None:
    rows = rule_power(WER_HIGH, [_pilot("adapter", -0.05), _pilot("merged", 0.05)], 36, 1, CONF3)
    measured = next(r for r in rows if r.pilot == "as measured")
    assert measured.candidate == "merged" and measured.effect == pytest.approx(0.05)
    assert (
        measured.note is not None and "the less favourable of 2 model candidates (adapter " in measured.note and "merged " in measured.note
    )


def test_power_is_stated_for_an_ordinary_and_a_catastrophic_pilot() -> None:
    failure = GateRule(metric="wer:basic", statistic="new_failure_rate_high", op="<=", threshold=0.15)
    rows = rule_power(failure, [_pilot("adapter", 0.0)], 36, 1, CONF3)
    assert [r.pilot for r in rows] == ["as measured", "with 5% catastrophic prompts"]
    assert rows[0].power == pytest.approx(1.0) and rows[1].power == pytest.approx(0.95**36)  # exact binomial
    kept = rule_power(failure.model_copy(update={"statistic": "kept_delta_high"}), [_pilot("adapter", 0.0)], 36, 1, CONF3)
    assert kept[1].power is not None and kept[0].power is not None and kept[1].power < kept[0].power  # fewer prompts kept
    mean = rule_power(WER_HIGH, [_pilot("adapter", 0.0)], 36, 1, CONF3)
    assert mean[1].power is not None and mean[0].power is not None and mean[1].power < mean[0].power - 0.05
    # the promotion receipt's warning reads the pilot as measured, not the catastrophic what-if
    assert power_warning([mean[0], mean[1].__class__(**{**mean[1].__dict__, "power": 0.1})]) is None


def test_the_challenger_count_comes_from_the_policy() -> None:
    doc = plans()["promote-demo.yaml"]
    assert challengers_of(PromotionPolicy.model_validate(doc)) == 3
    assert challengers_of(PromotionPolicy.model_validate({**doc, "best_k": 4, "include_last": False})) == 4
