"""``voxledger bench --only stats``, round two: the data where plain t inference breaks.

Every row runs the functions the stages call (``paired_delta``, ``failure_split``, ``judge``,
``adjust_family``, ``crossed_mean``) on data simulated with a fixed seed. Scenarios:

- *catastrophic q* (q = 5%, 10%), 20 prompts x 1 seed (the demo gate): incumbent WER per prompt
  b ~ Beta(2, 10); the challenger fails a prompt outright with probability q (WER b + 0.8) and
  improves the others by a factor (1 - r) with lognormal noise (sd 0.1). ``r`` puts the true mean
  delta at 0 (two-sided Type-I of a test of the mean) or at the margin 0.02 (the boundary of a
  non-inferiority rule ``delta_high <= 0.02``, so any pass is a false pass). Truths (mean delta,
  failure-rate difference, delta over the prompts kept) are computed from 10^6 draws.
- *equal failures*: both sides fail with probability q, the rest unchanged: Type-I of the two
  parts of ``failure_split``.
- *round-off constant delta* and *identical challenger*: c = b + 0.02 and c = b.
- *bounded*: a gate pass rate 0.9 (Bernoulli per prompt), paired pass rates 0.9 vs 0.8, a
  similarity crowded at 1, MUSHRA near 100 and ACR near 5 (listening, clipped to the scale).
- *rounds*: 3 challengers at the margin on heterogeneous data: per-challenger and per-round
  false passes, with the round's Bonferroni confidence.
- *families*: 18 null comparisons of one evaluation and the 6 pairs of a 4-candidate listening
  test: familywise error of raw p < 0.05 against Holm-adjusted p < 0.05.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from scipy import stats

from voxledger.bench_sections.common import Figure
from voxledger.schemas.evaluation import Comparison, StatisticsSettings
from voxledger.schemas.listening import Statistics
from voxledger.schemas.listening_receipts import RatingRow
from voxledger.schemas.promotion import GateRule
from voxledger.tasks.evaluation.stats import adjust_family, clustered_interval, failure_split, interval_of_means, paired_delta, t_test
from voxledger.tasks.listening.stats import crossed_mean, paired_deltas
from voxledger.tasks.power import round_confidence
from voxledger.tasks.stages.promote import judge

MARGIN = 0.02
SETTINGS = StatisticsSettings()
Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def _pairs(values: np.ndarray) -> dict[tuple[str, int], float]:
    return {(f"p{i:03d}", 0): float(v) for i, v in enumerate(values)}


def catastrophic(q: float, r: float, both: bool = False) -> Draw:
    """(challenger, incumbent) WER per prompt: catastrophic failures with probability ``q``."""

    def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
        b = rng.beta(2, 10, k)
        rest = b * (1 - r) * rng.lognormal(-0.005, 0.1, k)
        c = np.where(rng.random(k) < q, b + 0.8, rest)
        if both:
            b = np.where(rng.random(k) < q, b + 0.8, b)
        return c, b

    return draw


@cache
def truths(q: float, r: float, both: bool = False) -> tuple[float, float, float]:
    """(mean delta, failure-rate difference, mean delta over prompts neither side failed), 10^6 draws."""
    c, b = catastrophic(q, r, both)(np.random.default_rng(12345), 1_000_000)
    thr = SETTINGS.failure_threshold
    keep = (c < thr) & (b < thr)
    return float((c - b).mean()), float((c >= thr).mean() - (b >= thr).mean()), float((c - b)[keep].mean())


def solve_r(q: float, target: float) -> float:
    """The improvement factor of the non-failed prompts that puts the true mean delta at ``target``."""
    lo, hi = -1.0, 0.99
    for _ in range(40):
        mid = (lo + hi) / 2
        if catastrophic_mean(q, mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def catastrophic_mean(q: float, r: float) -> float:
    """Closed-form mean delta of ``catastrophic(q, r)`` (E[b] = 1/6, E[noise] = e^0 ~ 1)."""
    noise = float(np.exp(-0.005 + 0.1**2 / 2))
    return q * 0.8 + (1 - q) * (1 / 6) * ((1 - r) * noise - 1)


def _rule(metric: str, statistic: str, op: str, threshold: float) -> GateRule:
    return GateRule(metric=metric, statistic=statistic, op=op, threshold=threshold)  # type: ignore[arg-type]


def _comparison(c: np.ndarray, b: np.ndarray, st: StatisticsSettings, metric: str = "wer:basic") -> Comparison:
    cand, base = _pairs(c), _pairs(b)
    delta, test, n = paired_delta(cand, base, st, metric=metric)
    split = failure_split(cand, base, st) if metric.startswith("wer") else None
    return Comparison(candidate="c", baseline="b", metric=metric, delta=delta, test=test, n_pairs=n, lower_is_better=True, failures=split)


def _passes(comp: Comparison, rules: list[GateRule]) -> bool:
    return all(judge(r, "c", {("c", r.metric): comp}, {}).passed for r in rules)


def sign_flip_p(d: np.ndarray, rng: np.random.Generator, flips: int = 999) -> tuple[float, float]:
    """(two-sided, lower one-sided) Monte Carlo sign-flip p-values of mean(d) = 0 (the alternative rejected)."""
    signs = rng.choice((-1.0, 1.0), size=(flips, d.size))
    null = (signs * np.abs(d)).mean(axis=1)
    obs = d.mean()
    two = (1 + np.sum(np.abs(null) >= abs(obs) - 1e-15)) / (flips + 1)
    lower = (1 + np.sum(null <= obs + 1e-15)) / (flips + 1)
    return float(two), float(lower)


def _pct(x: float, reps: int) -> float:
    return 100 * x / reps


def catastrophic_rows(q: float, k: int, reps: int, seed: int) -> list[Figure]:
    """t, sign-flip and the two-part rule on catastrophic prompts at rate ``q``."""
    label = f"catastrophic {100 * q:.0f}%, {k} x 1"
    rng = np.random.default_rng(seed)
    zero, at_margin = catastrophic(q, solve_r(q, 0.0)), catastrophic(q, solve_r(q, MARGIN))
    _, rate_truth, _ = truths(q, solve_r(q, MARGIN))
    mean_rule = [_rule("wer:basic", "delta_high", "<=", MARGIN)]
    two_part = [_rule("wer:basic", "failure_rate_delta_high", "<=", rate_truth), _rule("wer:basic", "kept_delta_high", "<=", MARGIN)]
    t_rej = sf_rej = t_cov = 0
    t_pass = sf_pass = tp_pass = tp_round = t_round = 0
    round_st = SETTINGS.model_copy(update={"confidence": round_confidence(SETTINGS.confidence, 3)})
    for _ in range(reps):
        c, b = zero(rng, k)
        comp = _comparison(c, b, SETTINGS)
        t_rej += comp.test.p_value is not None and comp.test.p_value < 0.05
        t_cov += comp.delta.low is not None and comp.delta.low <= 0 <= (comp.delta.high or 0)
        sf_rej += sign_flip_p(c - b, rng)[0] < 0.05
        c, b = at_margin(rng, k)
        comp = _comparison(c, b, SETTINGS)
        t_pass += _passes(comp, mean_rule)
        tp_pass += _passes(comp, two_part)
        sf_pass += sign_flip_p(c - b - MARGIN, rng)[1] < 0.025
        rounds = [_comparison(*at_margin(rng, k), round_st) for _ in range(3)]
        t_round += any(_passes(x, mean_rule) for x in rounds)
        tp_round += any(_passes(x, two_part) for x in rounds)
    return [
        Figure(f"{label}: mean delta, cluster_t Type-I at 5%", _pct(t_rej, reps), "%", _goal(_pct(t_rej, reps), "type1")),
        Figure(f"{label}: mean delta, cluster_t coverage at 95%", _pct(t_cov, reps), "%", _goal(_pct(t_cov, reps), "cover")),
        Figure(f"{label}: mean delta, sign-flip Type-I at 5%", _pct(sf_rej, reps), "%", _goal(_pct(sf_rej, reps), "type1")),
        Figure(f"{label}: delta_high <= {MARGIN} false pass per challenger", _pct(t_pass, reps), "%", _goal(_pct(t_pass, reps), "one")),
        Figure(
            f"{label}: sign-flip non-inferiority false pass per challenger", _pct(sf_pass, reps), "%", _goal(_pct(sf_pass, reps), "one")
        ),
        Figure(f"{label}: delta_high false pass per 3-challenger round", _pct(t_round, reps), "%", _goal(_pct(t_round, reps), "round")),
        Figure(f"{label}: two-part rule false pass per challenger", _pct(tp_pass, reps), "%", _goal(_pct(tp_pass, reps), "one")),
        Figure(
            f"{label}: two-part rule false pass per 3-challenger round", _pct(tp_round, reps), "%", _goal(_pct(tp_round, reps), "round")
        ),
    ]


def equal_failure_rows(q: float, k: int, reps: int, seed: int) -> list[Figure]:
    """Both sides fail prompts at rate ``q``: Type-I and coverage of the two parts."""
    label = f"equal failures {100 * q:.0f}%, {k} x 1"
    rng, draw = np.random.default_rng(seed), catastrophic(q, 0.0, both=True)
    _, rate_truth, kept_truth = truths(q, 0.0, True)
    rate_rej = rate_cov = kept_rej = kept_cov = 0
    for _ in range(reps):
        split = _comparison(*draw(rng, k), SETTINGS).failures
        assert split is not None
        rd, kd = split.rate_delta, split.kept
        rate_rej += rd.low is not None and (rd.low > 0 or (rd.high or 0) < 0)
        rate_cov += rd.low is not None and rd.low <= rate_truth <= (rd.high or 0)
        if kd.low is not None and kd.high is not None:
            kept_rej += kd.low > 0 or kd.high < 0
            kept_cov += kd.low <= kept_truth <= kd.high
    return [
        Figure(
            f"{label}: failure-rate difference (Newcombe) Type-I at 5%", _pct(rate_rej, reps), "%", _goal(_pct(rate_rej, reps), "type1")
        ),
        Figure(f"{label}: failure-rate difference (Newcombe) coverage", _pct(rate_cov, reps), "%", _goal(_pct(rate_cov, reps), "cover")),
        Figure(f"{label}: kept-prompt delta Type-I at 5%", _pct(kept_rej, reps), "%", _goal(_pct(kept_rej, reps), "type1")),
        Figure(f"{label}: kept-prompt delta coverage", _pct(kept_cov, reps), "%", _goal(_pct(kept_cov, reps), "cover")),
    ]


def degenerate_rows(reps: int, seed: int) -> list[Figure]:
    """Round-off constant deltas and identical challengers: never estimable, never passing."""
    rng = np.random.default_rng(seed)
    estimable = zero_width = p_zero = identical_pass = 0
    rules = [_rule("wer:basic", s, op, t) for s, op, t in (("delta_low", ">=", 0.0), ("delta_mean", "<=", 0.0), ("delta_high", "<=", 0.1))]
    for _ in range(reps):
        b = rng.beta(2, 10, 20)
        comp = _comparison(b + 0.02, b, SETTINGS)
        estimable += comp.delta.low is not None
        zero_width += comp.delta.low is not None and comp.delta.low == comp.delta.high
        p_zero += comp.test.p_value is not None and comp.test.p_value < 1e-12
        same = _comparison(b, b.copy(), SETTINGS)
        identical_pass += any(judge(r, "c", {("c", r.metric): same}, {}).passed for r in rules)
    return [
        Figure("round-off constant delta: estimable", _pct(estimable, reps), "%", "0: " + ("ok" if estimable == 0 else "SHORT")),
        Figure(
            "round-off constant delta: zero-width interval", _pct(zero_width, reps), "%", "0: " + ("ok" if zero_width == 0 else "SHORT")
        ),
        Figure("round-off constant delta: p < 1e-12", _pct(p_zero, reps), "%", "0: " + ("ok" if p_zero == 0 else "SHORT")),
        Figure(
            "identical challenger: passes any paired rule",
            _pct(identical_pass, reps),
            "%",
            "0: " + ("ok" if identical_pass == 0 else "SHORT"),
        ),
    ]


def _goal(value: float, kind: str) -> str:
    if kind == "type1":
        return "3-7: " + ("ok" if 3 <= value <= 7 else "SHORT")
    if kind == "cover":
        return ">= 93: " + ("ok" if value >= 93 else "SHORT")
    if kind == "one":
        return "<= 2.5: " + ("ok" if value <= 2.5 else "SHORT")
    if kind == "round":
        return "<= 5: " + ("ok" if value <= 5 else "SHORT")
    if kind == "fwer":
        return "<= 5: " + ("ok" if value <= 5 else "SHORT")
    return "0: " + ("ok" if value == 0 else "SHORT")


def bounded_rows(reps: int, seed: int) -> list[Figure]:
    """Gate pass rates (Wilson), paired pass rates (Newcombe), a similarity near 1: coverage and range."""
    rng = np.random.default_rng(seed)
    ids = [f"p{i:02d}" for i in range(20)]
    cov = {"wilson": 0, "t": 0, "newcombe": 0, "sim": 0}
    out = {"wilson": 0, "t": 0, "newcombe": 0, "sim": 0}
    sim_truth = 1 - 0.02  # 1 - Exponential(0.02), clipped at -1 (never)
    for _ in range(reps):
        passed = (rng.random(20) < 0.9).astype(float)
        iv = clustered_interval(passed.tolist(), ids, SETTINGS, metric="content_gate_pass")
        cov["wilson"] += iv.low is not None and iv.low <= 0.9 <= (iv.high or 0)
        out["wilson"] += iv.low is not None and (iv.low < 0 or (iv.high or 0) > 1)
        if np.ptp(passed) > 0:
            lo, hi = stats.t.interval(0.95, 19, loc=passed.mean(), scale=stats.sem(passed))
            cov["t"] += lo <= 0.9 <= hi
            out["t"] += hi > 1
        base = (rng.random(20) < 0.8).astype(float)
        cand = np.where(base == 1, (rng.random(20) < 0.95).astype(float), (rng.random(20) < 0.5).astype(float))
        comp = _comparison(cand, base, SETTINGS, metric="content_gate_pass")
        truth = 0.8 * 0.95 + 0.2 * 0.5 - 0.8
        cov["newcombe"] += comp.delta.low is not None and comp.delta.low <= truth <= (comp.delta.high or 0)
        out["newcombe"] += comp.delta.low is not None and (comp.delta.low < -1 or (comp.delta.high or 0) > 1)
        sim = 1 - rng.exponential(0.02, 20)
        iv = clustered_interval(sim.tolist(), ids, SETTINGS, metric="speaker_sim")
        cov["sim"] += iv.low is not None and iv.low <= sim_truth <= (iv.high or 0)
        out["sim"] += iv.low is not None and (iv.high or 0) > 1
    figures = []
    for key, name in (("wilson", "gate pass rate 0.9, 20 prompts, Wilson"), ("t", "gate pass rate 0.9, 20 prompts, plain t (contrast)"),
                      ("newcombe", "paired pass rates 0.86 vs 0.8, Newcombe"), ("sim", "similarity near 1, bounded t")):  # fmt: skip
        figures.append(Figure(f"bounded: {name}: coverage", _pct(cov[key], reps), "%", _goal(_pct(cov[key], reps), "cover")))
        tag = "contrast" if key == "t" else ("ok" if out[key] == 0 else "SHORT")
        figures.append(Figure(f"bounded: {name}: intervals outside the range", _pct(out[key], reps), "%", f"0: {tag}"))
    return figures + listening_bounded_rows(reps // 2, seed + 1)


def listening_bounded_rows(reps: int, seed: int) -> list[Figure]:
    """MUSHRA near 100 and ACR near 5 on 6 raters x 10 prompts (crossed): coverage and range.

    Scores are rater bias + prompt effect + noise, rounded to the scale's step and clipped to it;
    the truth is the mean of that clipped distribution (2 x 10^6 draws).
    """
    rng = np.random.default_rng(seed)
    r_idx, p_idx = np.arange(60) % 6, np.arange(60) // 6
    raters, prompts = [f"r{i}" for i in r_idx], [f"p{i}" for i in p_idx]
    figures = []
    for name, centre, sd, lo, hi in (("MUSHRA [0, 100] near 100", 95.0, 6.0, 0.0, 100.0), ("ACR [1, 5] near 5", 4.6, 0.6, 1.0, 5.0)):
        big = np.random.default_rng(99)
        n = 2_000_000
        truth = float(np.clip(np.round(centre + big.normal(0, sd / 2, n) + big.normal(0, sd / 3, n) + big.normal(0, sd, n)), lo, hi).mean())
        cov = outside = 0
        for _ in range(reps):
            y = centre + rng.normal(0, sd / 2, 6)[r_idx] + rng.normal(0, sd / 3, 10)[p_idx] + rng.normal(0, sd, 60)
            e = crossed_mean(np.clip(np.round(y), lo, hi).tolist(), raters, prompts, 0.95, (lo, hi), seed=int(rng.integers(2**31)))
            cov += e.low is not None and e.low <= truth <= (e.high or 0)
            outside += e.low is not None and ((e.low or 0) < lo or (e.high or 0) > hi)
        figures.append(
            Figure(
                f"bounded: {name}, 6 x 10 crossed: intervals outside the range",
                _pct(outside, reps),
                "%",
                _goal(_pct(outside, reps), "zero"),
            )
        )
        figures.append(Figure(f"bounded: {name}, 6 x 10 crossed: coverage", _pct(cov, reps), "%", _goal(_pct(cov, reps), "cover")))
    return figures


def bootstrap_rows(reps: int, seed: int) -> list[Figure]:
    """``cluster_t`` against ``cluster_bootstrap_t`` at 20 x 1 on the data the issue named."""
    boot = StatisticsSettings(interval="cluster_bootstrap_t", bootstrap_resamples=999)
    models: dict[str, Callable[[np.random.Generator], np.ndarray]] = {
        "zero-inflated": lambda g: np.where(g.random(20) < 0.7, 0.0, g.lognormal(-2, 1, 20)),
        "skewed": lambda g: g.lognormal(0, 0.5, 20),
        "heavy": lambda g: g.lognormal(0, 1, 20),
        "bounded": lambda g: g.beta(8, 1, 20),
    }
    truths_ = {
        "zero-inflated": 0.3 * float(np.exp(-2 + 0.5)),
        "skewed": float(np.exp(0.125)),
        "heavy": float(np.exp(0.5)),
        "bounded": 8 / 9,
    }
    figures = []
    for name, draw in models.items():
        rng = np.random.default_rng(seed)
        cov = {"cluster_t": 0, "cluster_bootstrap_t": 0}
        for _ in range(reps):
            means = draw(rng)
            for st in (SETTINGS, boot):
                iv = interval_of_means(means, 20, st)
                cov[st.interval] += iv.low is not None and iv.low <= truths_[name] <= (iv.high or 0)
        for method, n in cov.items():
            figures.append(Figure(f"{method}, 20 x 1, {name}: coverage at 95%", _pct(n, reps), "%", _goal(_pct(n, reps), "cover")))
    return figures


def round_rows(reps: int, seed: int) -> list[Figure]:
    """3 challengers at the non-inferiority margin on heterogeneous data (20 x 1)."""
    rng = np.random.default_rng(seed)
    rule = [_rule("wer:basic", "delta_high", "<=", MARGIN)]
    plain = bonf = single = 0
    round_st = SETTINGS.model_copy(update={"confidence": round_confidence(SETTINGS.confidence, 3)})

    def draw() -> tuple[np.ndarray, np.ndarray]:
        b = 0.3 + rng.normal(0, 0.05, 20)
        return b + MARGIN + rng.normal(0, 0.04, 20), b

    for _ in range(reps):
        data = [draw() for _ in range(3)]
        single += _passes(_comparison(*data[0], SETTINGS), rule)
        plain += any(_passes(_comparison(*d, SETTINGS), rule) for d in data)
        bonf += any(_passes(_comparison(*d, round_st), rule) for d in data)
    return [
        Figure("3-challenger round at the margin: false pass per challenger", _pct(single, reps), "%", _goal(_pct(single, reps), "one")),
        Figure("3-challenger round at the margin: per round, unadjusted (contrast)", _pct(plain, reps), "%", "contrast"),
        Figure("3-challenger round at the margin: per round, Bonferroni", _pct(bonf, reps), "%", _goal(_pct(bonf, reps), "round")),
    ]


def family_rows(reps: int, seed: int) -> list[Figure]:
    """18 null comparisons in one evaluation; 6 pairs of a 4-candidate listening test."""
    rng = np.random.default_rng(seed)
    raw = holm = 0
    for _ in range(reps):
        tests = [t_test(rng.normal(0, 1, 20), SETTINGS) for _ in range(18)]
        raw += any(t.p_value is not None and t.p_value < 0.05 for t in tests)
        holm += any(t.p_adjusted is not None and t.p_adjusted < 0.05 for t in adjust_family(tests, "bench", "holm"))
    l_raw = l_holm = 0
    l_reps = max(10, 2 * reps)  # Holm bounds the family at 5% in theory here: 2x the data sets (SE ~0.5 points) to show it
    for i in range(l_reps):
        spec = Statistics(seed=i)  # a fresh simulation seed per data set
        rows = []
        bias = rng.normal(0, 0.5, 6)
        for r in range(6):
            for p in range(10):
                g = rng.normal(0, 0.3)
                for cand in "abcd":
                    score = 3 + bias[r] + g + rng.normal(0, 1)
                    rows.append(RatingRow.model_construct(rater_id=f"r{r}", stimulus=f"{r}{p}{cand}", trial="t", role="stimulus", task="acr", criterion="q",
                                          candidate=cand, prompt_id=f"p{p}", category="c", score=score, audio_sha256="0" * 64, included=True))  # fmt: skip
        deltas = paired_deltas(rows, spec, {"q": "higher_better"})
        l_raw += any(d.p_value is not None and d.p_value < 0.05 for d in deltas)
        l_holm += any(d.better is not None for d in deltas)
    return [
        Figure("18-way family, 20 x 1, all null: FWER of raw p < 0.05 (contrast)", _pct(raw, reps), "%", "contrast"),
        Figure("18-way family, 20 x 1, all null: FWER with Holm", _pct(holm, reps), "%", _goal(_pct(holm, reps), "fwer")),
        Figure("listening 6 pairs, 6 x 10 crossed, all null: any raw p < 0.05 (contrast)", _pct(l_raw, l_reps), "%", "contrast"),
        Figure(
            "listening 6 pairs, 6 x 10 crossed, all null: any 'better' (Holm)",
            _pct(l_holm, l_reps),
            "%",
            _goal(_pct(l_holm, l_reps), "fwer"),
        ),
    ]


DEMO_WER_SD = 0.2874
"""Prompt sd of the demo's WER delta: README's adapter - base +0.005 [-0.129, 0.140] over 20 prompts
(cluster_t), so se = 0.269 / (2 t(0.975, 19)) = 0.0643 and sd = se sqrt(20)."""


DEMO_EVALUATION = (0.0154, 0.2366)
"""WER delta (adapter - base) and prompt sd of the demo run's evaluation that README reports
(+0.015 over 20 prompts): `voxledger plan power plans/promote-demo.yaml --pilot <it>` gives 48% per
challenger at the round's 98.33% and 36 prompts for 80%."""


def power_rows(reps: int, seed: int) -> list[Figure]:
    """``plan power`` against the gate itself, at the demo's WER rule ``delta_high <= 0.15``:
    at README's earlier delta +0.005 (prompt sd ``DEMO_WER_SD``), one challenger at 95% and 20
    prompts (the demo gate as it ran, issue 28's 55%), and a 3-challenger round (Bonferroni) at 20
    prompts and at the count recommended; then the same round at the demo evaluation's own effect
    and spread (``DEMO_EVALUATION``), at 20 prompts and at the count ``plan power`` recommends."""
    from voxledger.tasks.power import power_of, prompts_needed

    margin = 0.15
    conf3 = round_confidence(SETTINGS.confidence, 3)
    rule = [_rule("wer:basic", "delta_high", "<=", margin)]
    rng = np.random.default_rng(seed)
    figures = []
    for effect, sd, designs in (
        (0.005, DEMO_WER_SD, ((20, SETTINGS.confidence, "1 challenger at 95%"), (20, conf3, "3-challenger round"))),
        (*DEMO_EVALUATION, ((20, conf3, "3-challenger round"),)),
    ):
        need = prompts_needed("delta_high", "<=", margin, effect, sd, conf3, 0.8) or 5
        for k, conf, what in (*designs, (need, conf3, "3-challenger round")):
            st = SETTINGS.model_copy(update={"confidence": conf})
            passed = 0
            for _ in range(reps):
                b = rng.uniform(0.2, 0.6, k)
                passed += _passes(_comparison(b + rng.normal(effect, sd, k), b, st), rule)
            label = f"power, demo WER rule delta_high <= 0.15 (effect {effect:+g}, sd {sd}), {what}, {k} prompts"
            figures.append(
                Figure(f"{label}: predicted", 100 * power_of("delta_high", "<=", margin, effect, sd, k, conf), "%", "plan power")
            )
            goal = (">= 80: " + ("ok" if _pct(passed, reps) >= 80 else "SHORT")) if k == need else "descriptive"
            figures.append(Figure(f"{label}: simulated", _pct(passed, reps), "%", goal))
    return figures


def bench_robust(reps: int) -> list[Figure]:
    """Every round-two scenario at ``reps`` simulated data sets (fixed seeds)."""
    figures: list[Figure] = []
    for q in (0.05, 0.10):
        figures += catastrophic_rows(q, 20, reps, seed=21)
        figures += equal_failure_rows(q, 20, reps, seed=22)
    figures += degenerate_rows(max(50, reps // 4), seed=23)
    figures += bounded_rows(reps, seed=24)
    # at the margin the t test is exact (2.5% expected): 4x the data sets shrink the Monte Carlo error to ~0.25 points
    figures += round_rows(4 * reps, seed=25)
    figures += family_rows(reps, seed=26)
    figures += bootstrap_rows(max(100, reps // 4), seed=27)
    figures += power_rows(max(100, 2 * reps), seed=28)  # SE ~0.9 points at 2000: the >= 80% check sits near 81%
    return figures
