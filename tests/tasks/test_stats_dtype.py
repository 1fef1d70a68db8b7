"""Round-off judged at the precision the values were computed in: float32 inputs for every interval method."""

from __future__ import annotations

import numpy as np
import pytest

from voxledger.schemas.evaluation import Comparison, StatisticsSettings
from voxledger.schemas.promotion import GateRule
from voxledger.tasks.evaluation.intervals import precision, round_off
from voxledger.tasks.evaluation.stats import clustered_interval, failure_split, paired_delta
from voxledger.tasks.listening.stats import crossed_mean
from voxledger.tasks.stages.promote import judge

METHODS = ("cluster_t", "cluster_bootstrap_t")


def _pairs(values: np.ndarray) -> dict[tuple[str, int], float]:
    return {(f"p{i:02d}", 0): v for i, v in enumerate(values)}


def _jitter(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x`` moved by 0-3 float32 ulps either way (a float32 model run again on other hardware)."""
    steps = rng.integers(-3, 4, x.size)
    out = x.copy()
    for i, s in enumerate(steps):
        for _ in range(abs(s)):
            out[i] = np.nextafter(out[i], np.float32(np.sign(s) * np.inf))
    return out


@pytest.mark.parametrize("method", METHODS)
def test_a_constant_float32_delta_is_not_estimable(method: str) -> None:
    b = np.random.default_rng(0).beta(2, 10, 20).astype(np.float32)
    c = b + np.float32(0.1)  # computed in float32: the delta is 0.1 up to float32 round-off (~1e-8)
    st = StatisticsSettings(interval=method)
    delta, test, _ = paired_delta(_pairs(c), _pairs(b), st, metric="wer:basic")
    assert delta.low is None and delta.high is None and "round-off" in (delta.note or "")
    assert test.p_value is None
    # the same through Python floats (how an observation stores a float32 model's output)
    delta, test, _ = paired_delta(_pairs(c.tolist()), _pairs(b.tolist()), st, metric="wer:basic")  # type: ignore[arg-type]
    assert delta.low is None and test.p_value is None
    comp = Comparison(candidate="c", baseline="b", metric="wer:basic", delta=delta, test=test, n_pairs=20, lower_is_better=True)
    for statistic, op, threshold in (("delta_high", "<=", 0.15), ("delta_low", ">=", 0.05)):
        rule = GateRule(metric="wer:basic", statistic=statistic, op=op, threshold=threshold)
        assert not judge(rule, "c", {("c", "wer:basic"): comp}, {}).passed


@pytest.mark.parametrize("method", METHODS)
def test_identical_audio_with_float32_jitter_never_passes(method: str) -> None:
    rng = np.random.default_rng(1)
    b = (0.8 + rng.normal(0, 0.05, 20)).astype(np.float32)
    c = _jitter(b, rng)
    st = StatisticsSettings(interval=method)
    delta, test, _ = paired_delta(_pairs(c), _pairs(b), st, metric="speaker_sim")
    assert delta.low is None and test.p_value is None
    comp = Comparison(candidate="c", baseline="b", metric="speaker_sim", delta=delta, test=test, n_pairs=20, lower_is_better=False)
    rule = GateRule(metric="speaker_sim", statistic="delta_low", op=">=", threshold=-0.02)
    assert not judge(rule, "c", {("c", "speaker_sim"): comp}, {}).passed


@pytest.mark.parametrize("method", METHODS)
def test_float32_summaries_with_jitter_only_are_not_estimable(method: str) -> None:
    rng = np.random.default_rng(2)
    values = _jitter(np.full(20, 0.7, dtype=np.float32), rng)
    iv = clustered_interval(values.tolist(), [f"p{i}" for i in range(20)], StatisticsSettings(interval=method), metric="speaker_sim")
    assert iv.low is None


def test_the_kept_part_of_a_float32_error_rate_is_not_estimable() -> None:
    b = np.random.default_rng(3).beta(2, 10, 20).astype(np.float32)
    split = failure_split(_pairs(b + np.float32(0.1)), _pairs(b), StatisticsSettings())
    assert split.kept.low is None


def test_listening_scores_in_float32_with_jitter_are_not_estimable() -> None:
    rng = np.random.default_rng(4)
    raters, prompts = [f"r{i % 6}" for i in range(60)], [f"p{i // 6}" for i in range(60)]
    deltas = _jitter(np.full(60, 0.1, dtype=np.float32), rng)
    est = crossed_mean(deltas.tolist(), raters, prompts, 0.95, resamples=200)
    assert est.low is None and est.p_value is None


@pytest.mark.parametrize("method", METHODS)
def test_real_spread_in_float32_is_still_estimated(method: str) -> None:
    rng = np.random.default_rng(5)
    b = (0.8 + rng.normal(0, 0.05, 20)).astype(np.float32)
    c = (b + rng.normal(0.01, 0.001, 20)).astype(np.float32)  # a real 0.001 spread: 1e-3 of the scale, not round-off
    delta, test, _ = paired_delta(_pairs(c), _pairs(b), StatisticsSettings(interval=method), metric="speaker_sim")
    assert delta.low is not None and test.p_value is not None


def test_precision_is_read_from_the_dtype_or_the_values() -> None:
    assert precision(np.zeros(3, dtype=np.float16)) == "float16"
    assert precision(np.array([0.1, 0.2], dtype=np.float32)) == "float32"
    assert precision(np.array([0.1, 0.2], dtype=np.float32).tolist()) == "float32"  # widened float32 values stay exact float32
    assert precision([0.1, 0.2]) == "float64"
    assert precision([1.0, 2.0, 5.0]) == "float64"  # integer scores say nothing of a computation's precision
    assert round_off([0.1, 0.2], np.array([0.3], dtype=np.float32)) == 1e-5
