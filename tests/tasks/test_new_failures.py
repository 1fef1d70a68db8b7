"""new_failure_rate_high: an exact bound on newly failed prompts that can pass at 36 prompts and holds its level."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from voxledger.schemas.evaluation import Comparison, StatisticsSettings
from voxledger.schemas.promotion import GateRule, PromotionPolicy, new_failure_floor
from voxledger.tasks.corpus.demo_plans import plans
from voxledger.tasks.evaluation.stats import failure_split, paired_delta
from voxledger.tasks.stages.promote import judge

ROUND = StatisticsSettings(confidence=1 - 0.05 / 3)  # a 3-challenger round
RULE = GateRule(metric="wer:basic", statistic="new_failure_rate_high", op="<=", threshold=0.15)


def _pairs(values: np.ndarray) -> dict[tuple[str, int], float]:
    return {(f"p{i:02d}", 0): float(v) for i, v in enumerate(values)}


def _passes(c: np.ndarray, b: np.ndarray) -> bool:
    delta, test, n = paired_delta(_pairs(c), _pairs(b), ROUND, metric="wer:basic")
    split = failure_split(_pairs(c), _pairs(b), ROUND)
    comp = Comparison(
        candidate="c", baseline="b", metric="wer:basic", delta=delta, test=test, n_pairs=n, lower_is_better=True, failures=split
    )
    return judge(RULE, "c", {("c", "wer:basic"): comp}, {}).passed


def test_passes_at_36_prompts_with_no_newly_failed_prompt() -> None:
    b = np.random.default_rng(0).beta(2, 10, 36)
    assert _passes(b * 0.9, b)  # Newcombe's failure_rate_delta_high gives 0.137 here: no margin of 0.15 or less passes it
    assert new_failure_floor(36, 0.95, 3) == pytest.approx(0.1245, abs=1e-4)


def test_holds_its_level_at_the_margin() -> None:
    rng, passed, reps = np.random.default_rng(1), 0, 2000
    for _ in range(reps):
        b = rng.beta(2, 10, 36)
        c = np.where(rng.random(36) < 0.15, b + 0.8, b * 0.8)  # newly fails 15% of prompts, improves the rest
        passed += _passes(c, b)
    assert passed / reps <= 0.0083 + 0.004  # one-sided 0.83% per challenger (exact: 0.85^36 = 0.29%)


def test_a_margin_the_gate_cannot_resolve_is_refused_at_plan_time() -> None:
    raw = plans()["promote-demo.yaml"]
    rules = [*raw["rules"], {"metric": "wer:whisper_en", "statistic": "new_failure_rate_high", "op": "<=", "threshold": 0.05}]
    with pytest.raises(
        ValidationError, match=r"can never pass: with 36 gate prompts and 3 challenger\(s\) the upper end .* 0\.125.* 94 prompts"
    ):
        PromotionPolicy.model_validate({**raw, "rules": rules})
