"""Listening statistics: crossed rater x prompt inference, Bradley-Terry identifiability, screening.

Rows are built directly (no audio, no packets) so each failure of the row-level methods is
reproduced on a few numbers, and the fixes are checked against statsmodels, choix and scipy.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from voxledger.bench_sections.stats import listening_cells, listening_rates
from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.listening import ScreeningRules, Statistics
from voxledger.schemas.listening_receipts import RatingRow
from voxledger.tasks.listening.screening import screen_rater
from voxledger.tasks.listening.stats import (
    NO_EFFECTS,
    PRETEST_ALPHA,
    _Cells,
    bradley_terry,
    candidate_scores,
    crossed_mean,
    paired_deltas,
    win_matrix,
)

SPEC = Statistics()
SHA = "0" * 64


def row(
    rater: str, prompt: str, cand: str, score: float, task: str = "acr", role: str = "stimulus", versus: str | None = None
) -> RatingRow:
    return RatingRow(rater_id=rater, stimulus=f"{rater}{prompt}{cand}", trial="t", role=role, task=task, criterion=task,  # type: ignore[arg-type]
                     candidate=cand, prompt_id=prompt, category="c", score=score, audio_sha256=SHA, versus_candidate=versus,
                     versus_audio_sha256=SHA if versus else None, included=True)  # fmt: skip


def ab_rows(outcomes: dict[tuple[str, str], list[float]], raters: int = 6) -> list[RatingRow]:
    """A/B rows: (A, B) -> CMOS scores, spread over raters and prompts."""
    out = []
    for (a, b), scores in outcomes.items():
        out += [row(f"r{i % raters}", f"p{i}", b, s, task="ab", versus=a) for i, s in enumerate(scores)]
    return out


def test_rater_clustering_holds_type_one_error_where_rows_did_not() -> None:
    # issue 15: rater-specific preference sd 0.5, true delta 0: the row-level Wilcoxon rejected
    # 0.48 on a 6 x 10 design. Fixed seeds, 300 data sets each.
    legacy = listening_rates((6, 10, 6), False, reps=150, seed=5, legacy=True)
    ours = listening_rates((6, 10, 6), False, reps=300, seed=5)
    assert legacy.rejected > 0.15 and legacy.covered < 0.9
    assert ours.rejected <= 0.08 and ours.covered >= 0.92


def test_two_raters_give_no_interval_and_no_verdict() -> None:
    rows = [row(r, f"p{i}", c, s) for r in ("r1", "r2") for i in range(6) for c, s in (("a", 3), ("b", 4 + (r == "r2")))]
    delta = paired_deltas(rows, SPEC, {"acr": "higher_better"})[0]
    assert delta.ci_low is None and delta.p_value is None and delta.better is None and delta.raters == 2
    assert "needs at least 5 raters" in (delta.note or "")
    assert all(s.ci_low is None and s.note for s in candidate_scores(rows, SPEC))


def test_four_unanimous_deltas_are_not_significant() -> None:
    # issue 15: [1, 1, 1, 1] got p 0.046 from the normal approximation; the exact Wilcoxon p is
    # 0.125, and four ratings from four raters are below the rater minimum in any case
    assert stats.wilcoxon([1, 1, 1, 1], method="exact").pvalue == pytest.approx(0.125)
    rows = [row(f"r{i}", f"p{i}", c, s) for i in range(4) for c, s in (("a", 3), ("b", 4))]
    delta = paired_deltas(rows, SPEC, {})[0]
    assert delta.p_value is None and delta.better is None


def test_crossed_interval_matches_statsmodels_two_way_cluster() -> None:
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(11)
    r = np.array([(p * 3 + j) % 7 for p in range(12) for j in range(3)])
    p = np.repeat(np.arange(12), 3)
    y = 0.3 + rng.normal(0, 0.5, 7)[r] + rng.normal(0, 0.4, 12)[p] + rng.normal(0, 1, r.size)
    e = crossed_mean(y.tolist(), [f"r{i}" for i in r], [f"p{i}" for i in p], 0.95)
    fit = sm.OLS(y, np.ones(y.size)).fit(cov_type="cluster", cov_kwds={"groups": np.column_stack([r, p]), "use_correction": True})
    assert e.low is not None and e.high is not None and e.t is not None and e.df is None
    assert e.mean / e.t == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert e.mean == pytest.approx(float(fit.params[0]))


def _two_way_t(y: np.ndarray, r: np.ndarray, p: np.ndarray) -> np.ndarray:
    """|t| of the mean of each row of ``y`` (draws, ratings), two-way clustered, written out directly."""
    n, m = y.shape[1], y.mean(axis=1)
    e = y - m[:, None]

    def part(idx: np.ndarray) -> np.ndarray:
        g = idx.max() + 1
        return np.stack([e[:, idx == k].sum(axis=1) for k in range(g)], 1) ** 2 @ np.ones(g) * g / (g - 1) / n**2

    cell = r * (p.max() + 1) + p
    v = part(r) + part(p) - part(np.unique(cell, return_inverse=True)[1])
    return np.abs(m) / np.sqrt(np.where(v > 0, v, np.maximum(part(r), part(p))))


def test_simulated_reference_has_the_tail_the_t_on_raters_lacked() -> None:
    # 6 raters x 10 prompts, one rating each, no rater or prompt effect: the 1 - 0.05 / 6 quantile
    # of |t| (the first step of Holm over six pairs) is ~5.5 by brute force, and t on 5 df put it
    # at 4.2, so a single pair passed Holm's first step twice as often as it should
    r, p = np.repeat(np.arange(6), 10), np.tile(np.arange(10), 6)
    truth = _two_way_t(np.random.default_rng(7).standard_normal((20000, 60)), r, p)
    level = 1 - 0.05 / 6
    t5 = stats.t.ppf(0.5 + level / 2, 5)
    beyond = float(np.mean(truth > t5))
    assert beyond > 1.6 * (1 - level)
    cells, _ = _Cells.of(r, p)
    simulated = cells.simulate_t((0.0, 0.0, 1.0), 20000, 3)
    assert float(np.mean(simulated > t5)) == pytest.approx(beyond, abs=0.003)
    assert float(np.quantile(simulated, 0.95)) == pytest.approx(float(np.quantile(truth, 0.95)), rel=0.03)


def test_variance_components_are_recovered_by_moments() -> None:
    # 40 raters x 60 prompts, 8 raters per prompt; variances 1, 0.25, 0.64: the mean of 20 fits
    rng = np.random.default_rng(2)
    r, p = listening_cells(40, 60, 8)
    cells, cell = _Cells.of(r, p)
    fits = [cells.components(3 + rng.normal(0, 1, 40)[r] + rng.normal(0, 0.5, 60)[p] + rng.normal(0, 0.8, r.size), cell) for _ in range(20)]
    s_r, s_p, s_e = np.mean(fits, axis=0)
    assert s_r == pytest.approx(1.0, rel=0.15) and s_p == pytest.approx(0.25, rel=0.25) and s_e == pytest.approx(0.64, rel=0.06)


def test_effect_f_tests_match_statsmodels_type_ii_anova() -> None:
    # unbalanced crossed design (8 raters x 12 prompts, 5 raters per prompt, some cells twice)
    statsmodels_formula = pytest.importorskip("statsmodels.formula.api")
    anova_lm = pytest.importorskip("statsmodels.stats.anova").anova_lm
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(11)
    r, p = listening_cells(8, 12, 5)
    r, p = np.concatenate([r, r[:7]]), np.concatenate([p, p[:7]])
    y = 3 + rng.normal(0, 0.3, 8)[r] + rng.normal(0, 0.6, 12)[p] + rng.normal(0, 1, r.size)
    cells, cell = _Cells.of(r, p)
    ours = cells.effect_p_values(y, cell)
    fit = statsmodels_formula.ols("y ~ C(r) + C(p)", data=pd.DataFrame({"y": y, "r": r, "p": p})).fit()
    table = anova_lm(fit, typ=2)
    assert ours == pytest.approx((table.loc["C(r)", "PR(>F)"], table.loc["C(p)", "PR(>F)"]), rel=1e-9)


def test_reference_keeps_only_the_effects_the_f_test_shows() -> None:
    # a strong rater effect is kept (its F test has p ~ 0), so the p-value is the fitted model's
    # or the rater-only model's, never the shorter-tailed no-effects one alone; with no effect at
    # all (both F tests p >= 0.2) the reference is at least the no-effects model's
    rng = np.random.default_rng(8)
    r, p = np.repeat(np.arange(6), 10), np.tile(np.arange(10), 6)
    names = [f"r{i}" for i in r], [f"p{i}" for i in p]
    cells, cell = _Cells.of(r, p)
    strong = rng.normal(0, 1.0, 6)[r] + rng.normal(0, 0.5, 60)
    strong = strong - strong.mean() + 1.5
    p_rater, p_prompt = cells.effect_p_values(strong, cell)
    assert p_rater < 1e-6 and p_prompt >= PRETEST_ALPHA
    e = crossed_mean(strong.tolist(), *names, 0.95, resamples=2000, seed=4)
    assert e.components is not None and e.t is not None
    kept = np.maximum(
        np.sort(cells.simulate_t(e.components, 2000, 4)), np.sort(cells.simulate_t((e.components[0], 0.0, e.components[2]), 2000, 4))
    )
    assert e.p_value == pytest.approx((1 + np.sum(kept >= abs(e.t))) / 2001)
    for seed in range(40):  # a null data set whose rater variance is fitted above 0 by chance
        null = np.random.default_rng(seed).normal(0, 1, 60) + 0.4
        if min(cells.effect_p_values(null, cell)) >= PRETEST_ALPHA and cells.components(null, cell)[0] > 0:
            break
    else:
        pytest.fail("no null data set among 40 had a rater variance fitted above 0 and both F tests at p >= 0.2")
    e = crossed_mean(null.tolist(), *names, 0.95, resamples=2000, seed=4)
    assert e.components is not None and e.t is not None and e.p_value is not None
    plain = (1 + np.sum(cells.simulate_t(NO_EFFECTS, 2000, 4) >= abs(e.t))) / 2001
    assert e.p_value >= plain - 1e-12


def test_paired_delta_records_the_simulated_reference() -> None:
    rng = np.random.default_rng(5)
    rows = [row(f"r{i}", f"p{j}", c, float(rng.normal(3 + (c == "b") * 0.4, 1))) for i in range(6) for j in range(10) for c in "ab"]
    (d,) = paired_deltas(rows, Statistics(bootstrap_resamples=500), {"acr": "higher_better"})
    assert d.method == "two_way_cluster_t_pretested_bootstrap" and d.df is None
    assert d.p_value is not None and 1 / 501 <= d.p_value <= 1
    assert paired_deltas(rows, Statistics(bootstrap_resamples=500), {"acr": "higher_better"})[0] == d  # same seed, same receipt
    assert all(s.method == d.method and s.df is None for s in candidate_scores(rows, SPEC))


def test_crossed_input_checks() -> None:
    with pytest.raises(EvaluationError, match="3 values, 2 rater ids and 3 prompt ids"):
        crossed_mean([1.0, 2.0, 3.0], ["a", "b"], ["p", "q", "r"], 0.95)
    with pytest.raises(EvaluationError, match="rating 1 .* is nan"):
        crossed_mean([1.0, float("nan")], ["a", "b"], ["p", "q"], 0.95)


def test_bradley_terry_refuses_separable_and_disconnected_data() -> None:
    separable = bradley_terry(ab_rows({("base", "adapter"): [2, 1, 3, 1, 2, 1]}), "ab", SPEC)
    assert not separable.identifiable and not separable.converged and separable.strengths is None and "separable" in (separable.note or "")
    disconnected = bradley_terry(ab_rows({("a", "b"): [1, -1, 2, -2], ("c", "d"): [1, -1, 1, -2]}), "ab", SPEC)
    assert not disconnected.identifiable and not disconnected.converged and "disconnected" in (disconnected.note or "")


def _reference_log_strengths(names: list[str], wins: np.ndarray) -> np.ndarray:
    """Maximum likelihood of the same Bradley-Terry model by scipy.optimize (log strengths, mean 0)."""

    def nll(theta: np.ndarray) -> float:
        diff = theta[:, None] - theta[None, :]
        return float(-(wins * (diff - np.logaddexp(0, diff))).sum())

    theta = optimize.minimize(nll, np.zeros(len(names)), method="BFGS", options={"gtol": 1e-10}).x
    return theta - theta.mean()


def test_bradley_terry_agrees_with_a_direct_fit_and_choix() -> None:
    rows = ab_rows({("a", "b"): [1, 2, -1, 1, 3, -2, 1, 1], ("b", "c"): [1, -1, 2, 2, 1, -1], ("a", "c"): [2, 1, 1, -1, 1, 2]})
    bt = bradley_terry(rows, "ab", SPEC)
    assert bt.identifiable and bt.converged and bt.strengths is not None
    names, wins, n = win_matrix(rows, "ab")
    ours = np.log([bt.strengths[c] for c in names])
    ours -= ours.mean()
    np.testing.assert_allclose(ours, _reference_log_strengths(names, wins), atol=1e-4)
    choix = pytest.importorskip("choix")
    pairs = [(i, j) for i in range(len(names)) for j in range(len(names)) for _ in range(int(wins[i, j]))]
    np.testing.assert_allclose(ours, choix.mm_pairwise(len(names), pairs, alpha=0.0, tol=1e-12), atol=1e-4)
    assert n == 20


def test_mushra_anchor_rule_excludes_a_rater_who_rates_the_anchor_high() -> None:
    rows = [row("r1", f"p{i}", "anchor", 95, task="mushra", role="low_anchor") for i in range(6)]
    rows += [row("r1", f"p{i}", "ref", 100, task="mushra", role="hidden_reference") for i in range(6)]
    verdict = screen_rater("r1", rows, {}, ScreeningRules(), None)
    assert not verdict.included and verdict.mushra_anchor_high_fraction == 1.0 and verdict.reasons[0].startswith("mushra_anchor:")
    one_slip = [r.model_copy(update={"score": 20}) if r.role == "low_anchor" and r.prompt_id != "p0" else r for r in rows]
    assert screen_rater("r1", one_slip, {}, ScreeningRules(mushra_anchor_max_fraction=0.2), None).included  # 1 of 6 = 17% <= 20%


def test_variance_rule_uses_population_variance() -> None:
    rows = [row("r1", f"p{i}", "a", s) for i, s in enumerate([3, 3, 3, 4])]
    verdict = screen_rater("r1", rows, {}, ScreeningRules(min_rating_variance=0.2), None)
    assert (
        verdict.rating_variance == pytest.approx(np.var([3, 3, 3, 4], ddof=0)) and not verdict.included
    )  # 0.1875 (ddof=1 would give 0.25)
