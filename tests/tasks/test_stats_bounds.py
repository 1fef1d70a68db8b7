"""Round-off, non-estimability in every gate rule, bounded intervals and multiplicity (issue 28)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from voxledger.schemas.evaluation import Comparison, Interval, PairedTest, StatisticsSettings
from voxledger.schemas.listening import Statistics
from voxledger.schemas.listening_receipts import RatingRow
from voxledger.schemas.promotion import GateRule
from voxledger.tasks.evaluation.intervals import bounded_t, holm, newcombe_paired, no_spread, wilson
from voxledger.tasks.evaluation.stats import adjust_family, clustered_interval, failure_split, paired_delta
from voxledger.tasks.listening.stats import candidate_scores, crossed_mean, paired_deltas
from voxledger.tasks.power import round_confidence
from voxledger.tasks.stages.promote import judge

SETTINGS = StatisticsSettings()
SHA = "0" * 64


def pairs(values: list[float]) -> dict[tuple[str, int], float]:
    return {(f"p{i:02d}", 0): v for i, v in enumerate(values)}


def compare(cand: dict[tuple[str, int], float], base: dict[tuple[str, int], float], metric: str = "wer:basic") -> Comparison:
    delta, test, n = paired_delta(cand, base, SETTINGS, metric=metric)
    split = failure_split(cand, base, SETTINGS) if metric.startswith(("wer", "cer")) else None
    return Comparison(candidate="c", baseline="b", metric=metric, delta=delta, test=test, n_pairs=n, lower_is_better=True, failures=split)


def verdict(comp: Comparison, statistic: str, op: str, threshold: float) -> tuple[bool, str]:
    rule = GateRule(metric=comp.metric, statistic=statistic, op=op, threshold=threshold)  # type: ignore[arg-type]
    v = judge(rule, "c", {("c", comp.metric): comp}, {})
    return v.passed, v.detail


BASE = np.random.default_rng(0).uniform(0.05, 0.6, 20).tolist()


def test_a_delta_constant_up_to_round_off_is_not_estimable() -> None:
    cand = [b + 0.1 for b in BASE]
    deltas = np.array(cand) - np.array(BASE)
    assert np.ptp(deltas) > 0  # the deltas really differ in the last bits: exact equality would call this spread
    delta, test, n = paired_delta(pairs(cand), pairs(BASE), SETTINGS, metric="wer:basic")
    assert n == 20 and delta.low is None and delta.high is None and "round-off" in (delta.note or "")
    assert test.p_value is None and test.statistic is None and "round-off" in (test.note or "")
    # every rule kind fails on it, with the reason, instead of judging a zero-width interval
    comp = compare(pairs(cand), pairs(BASE))
    for statistic, op, threshold in (("delta_high", "<=", 0.5), ("delta_low", ">=", -0.5), ("delta_mean", "<=", 0.5)):
        passed, detail = verdict(comp, statistic, op, threshold)
        assert not passed and "not estimable" in detail and "round-off" in detail, (statistic, detail)


def test_real_but_small_spread_stays_estimable() -> None:
    cand = [b + 0.1 + 1e-6 * i for i, b in enumerate(BASE)]
    delta, test, _ = paired_delta(pairs(cand), pairs(BASE), SETTINGS)
    assert delta.low is not None and delta.high is not None and delta.high > delta.low and test.p_value is not None
    assert test.p_value > 0


def test_an_identical_challenger_never_passes() -> None:
    comp = compare(pairs(BASE), pairs(BASE))
    assert comp.test.p_value is None
    for statistic, op, threshold in (("delta_mean", ">=", 0.0), ("delta_low", ">=", 0.0), ("delta_high", "<=", 0.0),
                                     ("delta_mean", "<=", 0.0), ("kept_delta_high", "<=", 0.1)):  # fmt: skip
        passed, detail = verdict(comp, statistic, op, threshold)
        assert not passed and "not estimable" in detail, (statistic, detail)


def test_a_delta_mean_rule_on_four_compared_prompts_fails_with_the_reason() -> None:
    # speaker similarity is measured only on rows that passed the content gate: 4 of 20 prompts survive
    rng = np.random.default_rng(1)
    base = pairs(rng.uniform(0.3, 0.5, 20).tolist())
    cand = {k: v + 0.2 + rng.normal(0, 0.05) for k, v in list(base.items())[:4]}
    comp = compare(cand, base, metric="speaker_sim")
    assert comp.delta.units == 4 and comp.delta.mean > 0.1
    passed, detail = verdict(comp, "delta_mean", ">=", 0.05)
    assert not passed and "4 prompt(s)" in detail and "needs at least 5" in detail


def test_no_spread_tolerance_is_relative_to_the_scale() -> None:
    assert no_spread(np.array([0.0, 0.0, 0.0]))
    assert no_spread(np.array([1e-17, -1e-17, 0.0]), scale=0.5)
    assert not no_spread(np.array([1e-17, -1e-17, 0.0]))  # at its own scale 1e-17 is all there is
    assert not no_spread(np.array([0.30, 0.31, 0.29]), scale=0.5)


def test_wilson_matches_statsmodels_and_gate_pass_rate_stays_in_range() -> None:
    for k, n in ((18, 20), (20, 20), (0, 7), (3, 11)):
        low, high = wilson(k, n, 0.95)
        ref = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert (low, high) == (pytest.approx(ref[0]), pytest.approx(ref[1]))
    # the demo's 0.900 [0.756, 1.044] case: 18 of 20 gate prompts pass
    iv = clustered_interval([1.0] * 18 + [0.0] * 2, [f"p{i}" for i in range(20)], SETTINGS, metric="content_gate_pass")
    assert iv.method == "wilson" and iv.mean == pytest.approx(0.9) and iv.high is not None and iv.high <= 1.0
    every = clustered_interval([1.0] * 20, [f"p{i}" for i in range(20)], SETTINGS, metric="content_gate_pass")
    assert every.low is not None and 0.8 < every.low < 1.0 and every.high == 1.0  # all pass: a rate, not "no spread"


def test_newcombe_paired_covers_and_stays_inside() -> None:
    # with uncorrelated pairs (ad = bc, phi = 0) method 10 is Newcombe's independent-samples interval
    a, b, c, d = 2, 4, 3, 6
    cand = np.array([1] * a + [1] * b + [0] * c + [0] * d)
    base = np.array([1] * a + [0] * b + [1] * c + [0] * d)
    ref = confint_proportions_2indep(a + b, 15, a + c, 15, method="newcomb")
    assert newcombe_paired(cand, base, 0.95) == (pytest.approx(ref[0]), pytest.approx(ref[1]))
    # positively correlated pairs narrow it: 12 both, 9 candidate only, 2 baseline only, 21 neither
    cand = np.array([1] * 12 + [1] * 9 + [0] * 2 + [0] * 21)
    base = np.array([1] * 12 + [0] * 9 + [1] * 2 + [0] * 21)
    low, high = newcombe_paired(cand, base, 0.95)
    unpaired = confint_proportions_2indep(21, 44, 14, 44, method="newcomb")
    assert unpaired[0] < low < 7 / 44 < high < unpaired[1] and low > 0
    rng, covered = np.random.default_rng(5), 0
    for _ in range(2000):
        shared = rng.random(20) < 0.3
        c = (shared | (rng.random(20) < 0.15)).astype(int)
        b = (shared | (rng.random(20) < 0.05)).astype(int)
        lo, hi = newcombe_paired(c, b, 0.95)
        assert -1 <= lo <= hi <= 1
        covered += lo <= 0.7 * 0.15 - 0.7 * 0.05 <= hi
    assert covered / 2000 >= 0.93


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=5, max_size=25), st.sampled_from(["speaker_sim", "silence_fraction", "anchor_hit_rate"]))
def test_no_interval_leaves_a_bounded_metric_range(values: list[float], metric: str) -> None:
    values = [0.97 + 0.03 * v for v in values]  # crowded against the top of the range
    iv = clustered_interval(values, [f"p{i}" for i in range(len(values))], SETTINGS, metric=metric)
    if iv.low is not None and iv.high is not None:
        assert (-1.0 if metric == "speaker_sim" else 0.0) <= iv.low <= iv.high <= 1.0


def test_fallback_is_recorded_when_the_t_interval_would_cross_a_bound() -> None:
    values = [1.0] * 8 + [0.2, 0.9]
    low, high, fell_back = bounded_t(float(np.mean(values)), float(np.std(values, ddof=1) / np.sqrt(10)), 9, 0.95, (0.0, 1.0))
    assert fell_back and 0 <= low < high <= 1
    iv = clustered_interval(values, [f"p{i}" for i in range(10)], SETTINGS, metric="anchor_hit_rate")
    assert iv.high is not None and iv.high <= 1.0 and "logit" in (iv.fallback or "")
    plain = clustered_interval([0.4, 0.5, 0.6, 0.45, 0.55], [f"p{i}" for i in range(5)], SETTINGS, metric="anchor_hit_rate")
    assert plain.fallback is None  # no note when the t interval fits
    wer = clustered_interval([0.0] * 9 + [0.9], [f"p{i}" for i in range(10)], SETTINGS, metric="wer:basic")
    assert wer.low is not None and wer.low >= 0.0 and "log" in (wer.fallback or "")


def rating(rater: str, prompt: str, cand: str, score: float, task: str = "acr") -> RatingRow:
    return RatingRow(rater_id=rater, stimulus=f"{rater}{prompt}{cand}", trial="t", role="stimulus", task=task, criterion=task,  # type: ignore[arg-type]
                     candidate=cand, prompt_id=prompt, category="c", score=score, audio_sha256=SHA, included=True)  # fmt: skip


def test_listening_intervals_stay_on_their_scales() -> None:
    rng = np.random.default_rng(3)
    rows = [rating(f"r{r}", f"p{p}", "x", float(5 if rng.random() < 0.93 else 4)) for r in range(6) for p in range(6)]
    rows += [rating(f"r{r}", f"p{p}", "y", float(100 if rng.random() < 0.9 else 60), "mushra") for r in range(6) for p in range(6)]
    scores = candidate_scores(rows, Statistics(), {"acr": (1, 5), "mushra": (0, 100)})
    acr = next(s for s in scores if s.task == "acr")
    mushra = next(s for s in scores if s.task == "mushra")
    assert acr.ci_high is not None and acr.ci_high <= 5 and mushra.ci_high is not None and mushra.ci_high <= 100
    assert acr.fallback is not None or acr.ci_high < 5  # a fallback is recorded whenever the bound was reached


def test_listening_round_off_constant_delta_favours_no_one() -> None:
    rng = np.random.default_rng(4)
    rows = []
    for r in range(6):
        for p in range(6):
            a = float(rng.uniform(1, 5))
            rows += [rating(f"r{r}", f"p{p}", "a", a), rating(f"r{r}", f"p{p}", "b", a + 0.1)]
    (d,) = paired_deltas(rows, Statistics(), {"acr": "higher_better"})
    assert d.ci_low is None and d.p_value is None and d.better is None and "round-off" in (d.note or "")
    e = crossed_mean([0.1 + 1e-17 * i for i in range(36)], [f"r{i % 6}" for i in range(36)], [f"p{i // 6}" for i in range(36)], 0.95)
    assert e.low is None and e.p_value is None


def test_holm_family_matches_statsmodels_and_is_recorded() -> None:
    p = [0.001, 0.02, 0.04, 0.3]
    tests = [PairedTest(method="cluster_t", units=10, statistic=1.0, p_value=x) for x in p]
    tests.append(PairedTest(method="cluster_t", units=3, statistic=None, p_value=None, note="3 prompt(s)"))
    out = adjust_family(tests, "evaluation e", "holm")
    ref = multipletests(p, method="holm")[1]
    assert [t.p_adjusted for t in out[:4]] == pytest.approx(list(ref))
    assert all(t.family == "evaluation e" and t.family_size == 4 and t.adjustment == "holm" for t in out[:4])
    assert out[4].p_adjusted is None and out[4].family is None  # a test that was not estimable is not in the family
    bh = adjust_family(tests, "evaluation e", "fdr_bh")
    assert [t.p_adjusted for t in bh[:4]] == pytest.approx(list(multipletests(p, method="fdr_bh")[1]))


def test_holm_matches_statsmodels_on_ties_large_values_and_one_test() -> None:
    rng = np.random.default_rng(7)
    families = [[0.5], [0.01, 0.01, 0.01], [0.3, 0.9, 0.2, 0.6], [0.04, 0.001, 0.04, 0.2, 0.001]]
    families += [list(rng.uniform(0, 0.2, size=n)) for n in (2, 7, 30)] + [list(rng.choice([0.01, 0.03, 0.5], size=12))]
    for p in families:
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]), rel=1e-12, abs=0), p


def test_listening_verdicts_use_holm_adjusted_p() -> None:
    rng = np.random.default_rng(2)  # seed 2: two pairs with raw p < 0.05 whose Holm p is not
    rows = []
    for r in range(6):
        for p in range(8):
            base = float(rng.normal(3, 0.5))
            for cand in "abcd":
                rows.append(rating(f"r{r}", f"p{p}", cand, base + rng.normal(0, 0.6) + (0.35 if cand == "d" else 0.0)))
    deltas = paired_deltas(rows, Statistics(), {"acr": "higher_better"})
    assert len(deltas) == 6 and all(d.family_size == 6 and d.adjustment == "holm" for d in deltas)
    borderline = [d for d in deltas if d.p_value is not None and d.p_value < 0.05 and (d.p_adjusted or 1) >= 0.05]
    assert borderline and all(d.ci_low is not None and d.ci_low > 0 for d in borderline)  # the raw interval excludes 0 ...
    assert all(d.better is None for d in borderline)  # ... but the family does not call it
    for d in deltas:
        assert d.p_adjusted is not None and d.p_value is not None and d.p_adjusted >= d.p_value


def test_round_confidence_is_bonferroni_over_challengers() -> None:
    assert round_confidence(0.95, 1) == pytest.approx(0.95)
    assert round_confidence(0.95, 3) == pytest.approx(1 - 0.05 / 3)


def test_two_part_error_rate_comparison() -> None:
    base = [0.1] * 18 + [0.05, 0.12]
    cand = [0.05 + 0.001 * i for i in range(18)] + [0.9, 0.1]  # one catastrophic prompt
    split = compare(pairs(cand), pairs(base)).failures
    assert split is not None and split.candidate_failed == 1 and split.baseline_failed == 0 and split.prompts == 20
    assert split.rate_delta.method == "newcombe_paired" and split.rate_delta.high is not None and split.rate_delta.high > 0.05
    assert split.kept.units == 19
    assert isinstance(split.kept, Interval)


def test_power_formula_matches_simulation_through_the_gate() -> None:
    from voxledger.tasks.power import power_of, prompts_needed

    # a WER non-inferiority rule: true delta +0.02, prompt sd 0.08, margin 0.05, 20 prompts
    effect, sd, margin, k = 0.02, 0.08, 0.05, 20
    predicted = power_of("delta_high", "<=", margin, effect, sd, k, 0.95)
    rng, passed, reps = np.random.default_rng(8), 0, 1500
    rule = GateRule(metric="wer:basic", statistic="delta_high", op="<=", threshold=margin)
    for _ in range(reps):
        base = rng.uniform(0.2, 0.4, k)
        comp = compare(pairs((base + rng.normal(effect, sd, k)).tolist()), pairs(base.tolist()))
        passed += judge(rule, "c", {("c", "wer:basic"): comp}, {}).passed
    assert abs(passed / reps - predicted) < 0.04  # Monte Carlo se ~0.013
    need = prompts_needed("delta_high", "<=", margin, effect, sd, 0.95, 0.8)
    assert need is not None and need > k and power_of("delta_high", "<=", margin, effect, sd, need, 0.95) >= 0.8
    assert power_of("delta_high", "<=", margin, effect, sd, need - 1, 0.95) < 0.8
    # an effect on the wrong side of the margin never reaches 80%
    assert prompts_needed("delta_high", "<=", margin, 0.06, sd, 0.95, 0.8) is None


def test_power_of_the_demo_gate_wer_rule() -> None:
    from voxledger.bench_sections.stats_robust import DEMO_WER_SD
    from voxledger.tasks.power import RulePower, power_of, power_warning, prompts_needed

    # README: adapter - base WER +0.005 [-0.129, 0.140] over 20 prompts; rule delta_high <= 0.15.
    # Issue 28 measured 55% per challenger by simulation; the noncentral t gives 57%.
    assert power_of("delta_high", "<=", 0.15, 0.005, DEMO_WER_SD, 20, 0.95) == pytest.approx(0.572, abs=0.005)
    conf3 = round_confidence(0.95, 3)
    assert power_of("delta_high", "<=", 0.15, 0.005, DEMO_WER_SD, 20, conf3) < 0.5
    assert prompts_needed("delta_high", "<=", 0.15, 0.005, DEMO_WER_SD, conf3, 0.8) == 45
    weak = RulePower("delta_high(wer:whisper_en) <= 0.15", "epoch1", 0.005, DEMO_WER_SD, 20, 1, conf3, 0.38, 45, {1: 45}, None)
    assert "38% at 20 prompts, 45 prompts for 80%" in (power_warning([weak]) or "")
    assert power_warning([weak.__class__(**{**weak.__dict__, "power": 0.6})]) is None
    hopeless = weak.__class__(**{**weak.__dict__, "prompts_needed": None})  # said in words, never "no feasible count of for 80%"
    assert "no prompt count up to the search limit reaches 80%" in (power_warning([hopeless]) or "")


def test_a_challenger_mean_on_too_few_surviving_prompts_fails() -> None:
    # speaker similarity of a challenger that passed the content gate on 3 of 20 prompts
    iv = clustered_interval([0.7, 0.8, 0.75], ["p0", "p1", "p2"], SETTINGS, metric="speaker_sim")
    rule = GateRule(metric="speaker_sim", statistic="challenger_mean", op=">=", threshold=0.5)
    failed = judge(rule, "c", {}, {("c", "speaker_sim"): iv}, min_units=5)
    assert not failed.passed and "rests on 3 prompt(s)" in failed.detail and "at least 5" in failed.detail
    assert judge(rule, "c", {}, {("c", "speaker_sim"): iv}, min_units=3).passed
