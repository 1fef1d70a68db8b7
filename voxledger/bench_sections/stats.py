"""``voxledger bench --only stats``: Type-I error and coverage of the shipped statistics, by simulation.

Every method a plan can select is run, through the same functions the stages call, on data
simulated with a fixed seed from the designs the demo and shipped plans use and from k = 5, 10,
30 units. Figures are percentages: Type-I error of the test at nominal 5% (goal 3-7%) and
coverage of the interval at nominal 95% (goal >= 93%); the goal column says ``ok`` or ``SHORT``.
The removed row-level methods are run on the same data for contrast (marked ``legacy``).

Data models (docs/statistics.md):
- evaluation, heterogeneous: y = u_prompt + e_seed, u ~ N(0, 0.5^2), e ~ N(0, 1);
- evaluation, skewed: u = lognormal(0, 0.5) - e^0.125 (skewness 1.75), e ~ N(0, 0.3^2);
- evaluation, heavy: u = lognormal(0, 1) - e^0.5 (skewness 6.2, a WER-like metric), e ~ N(0, 0.3^2);
- listening, heterogeneous: y = a_rater + g_prompt + e, a ~ N(0, 0.5^2), g ~ N(0, 0.3^2), e ~ N(0, 1);
- listening, skewed: a = exponential(0.5) - 0.5 (rater preference one-sided), same g and e.
True mean (delta) is 0 throughout, so rejection rate = Type-I error and coverage = P(0 in CI).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy import stats

from voxledger.bench_sections.common import Figure
from voxledger.schemas.evaluation import StatisticsSettings
from voxledger.tasks.evaluation.stats import interval_of_means, t_test
from voxledger.tasks.listening.stats import METHOD as LISTEN_METHOD
from voxledger.tasks.listening.stats import crossed_mean

ALPHA = 0.05
EVAL_DESIGNS: tuple[tuple[str, int, int], ...] = (
    ("k=5 x 4 seeds", 5, 4),
    ("k=10 x 4 seeds", 10, 4),
    ("k=30 x 4 seeds", 30, 4),
    ("eval-demo 20 x 1", 20, 1),
    ("eval-hard-cases 11 x 2", 11, 2),
)
LISTEN_DESIGNS: tuple[tuple[str, int, int, int], ...] = (
    ("demo 6 raters, 20 prompts, 3 per prompt", 6, 20, 3),
    ("5 raters, 20 prompts, 3 per prompt", 5, 20, 3),
    ("10 raters, 20 prompts, 3 per prompt", 10, 20, 3),
    ("30 raters, 20 prompts, 3 per prompt", 30, 20, 3),
    ("6 x 10 crossed", 6, 10, 6),
    ("12 x 10 crossed", 12, 10, 12),
    ("30 x 5 crossed", 30, 5, 30),
)


@dataclass(frozen=True)
class Rates:
    """Rejections of mean 0 and misses of 0 by the interval, over ``reps`` simulated data sets."""

    rejected: float
    covered: float


SKEW_SIGMA = {"skewed": 0.5, "heavy": 1.0}


def eval_data(rng: np.random.Generator, k: int, seeds: int, model: str) -> np.ndarray:
    """(prompts, seeds) values with mean 0: prompt effect + seed noise (``model`` as in the module doc)."""
    if model in SKEW_SIGMA:
        sigma = SKEW_SIGMA[model]
        out: np.ndarray = (rng.lognormal(0, sigma, k) - np.exp(sigma**2 / 2))[:, None] + rng.normal(0, 0.3, (k, seeds))
        return out
    return rng.normal(0, 0.5, k)[:, None] + rng.normal(0, 1, (k, seeds))


def eval_rates(settings: StatisticsSettings, k: int, seeds: int, model: str, reps: int, seed: int) -> Rates:
    """Type-I of the prompt-level test and coverage of the prompt-level interval."""
    rng, rejected, covered = np.random.default_rng(seed), 0, 0
    for _ in range(reps):
        means = eval_data(rng, k, seeds, model).mean(axis=1)
        iv = interval_of_means(means, k * seeds, settings)
        test = t_test(means, settings)
        rejected += test.p_value is not None and test.p_value < ALPHA
        covered += iv.low is not None and iv.high is not None and iv.low <= 0 <= iv.high
    return Rates(rejected / reps, covered / reps)


def legacy_eval_rates(k: int, seeds: int, model: str, reps: int, seed: int, resamples: int = 500) -> Rates:
    """The removed methods: Wilcoxon over rows, percentile bootstrap of prompts."""
    rng, rejected, covered = np.random.default_rng(seed), 0, 0
    for _ in range(reps):
        y = eval_data(rng, k, seeds, model)
        rejected += stats.wilcoxon(y.ravel()).pvalue < ALPHA
        boot = y.mean(axis=1)[rng.integers(0, k, (resamples, k))].mean(axis=1)
        low, high = np.quantile(boot, [0.025, 0.975])
        covered += low <= 0 <= high
    return Rates(rejected / reps, covered / reps)


def listening_cells(raters: int, prompts: int, per_prompt: int) -> tuple[np.ndarray, np.ndarray]:
    """A balanced cyclic design: prompt p is rated by raters (p * k + j) mod R, j < k."""
    r = np.array([(p * per_prompt + j) % raters for p in range(prompts) for j in range(per_prompt)])
    return r, np.repeat(np.arange(prompts), per_prompt)


def listening_data(rng: np.random.Generator, r: np.ndarray, p: np.ndarray, skewed: bool) -> np.ndarray:
    """Paired deltas (or centred scores) with mean 0: rater effect + prompt effect + noise."""
    rater = rng.exponential(0.5, r.max() + 1) - 0.5 if skewed else rng.normal(0, 0.5, r.max() + 1)
    out: np.ndarray = rater[r] + rng.normal(0, 0.3, p.max() + 1)[p] + rng.normal(0, 1, r.size)
    return out


def listening_rates(design: tuple[int, int, int], skewed: bool, reps: int, seed: int, legacy: bool = False) -> Rates:
    """Type-I and coverage of the two-way clustered t with its simulated reference (a fresh simulation
    seed per data set), or of the removed row-level Wilcoxon / rater bootstrap."""
    rng, rejected, covered = np.random.default_rng(seed), 0, 0
    r, p = listening_cells(*design)
    raters, prompts = [f"r{i}" for i in r], [f"p{i}" for i in p]
    for _ in range(reps):
        y = listening_data(rng, r, p, skewed)
        if legacy:
            rejected += stats.wilcoxon(y).pvalue < ALPHA
            sums, counts = np.bincount(r, weights=y), np.bincount(r)
            draw = rng.integers(0, sums.size, (500, sums.size))
            low, high = np.quantile(sums[draw].sum(axis=1) / counts[draw].sum(axis=1), [0.025, 0.975])
        else:
            e = crossed_mean(y.tolist(), raters, prompts, 0.95, seed=int(rng.integers(2**31)))
            rejected += e.p_value is not None and e.p_value < ALPHA
            low, high = (e.low, e.high) if e.low is not None else (np.inf, -np.inf)
        covered += low <= 0 <= high
    return Rates(rejected / reps, covered / reps)


def _figures(label: str, rates: Rates, legacy: bool = False) -> list[Figure]:
    t1, cov = 100 * rates.rejected, 100 * rates.covered
    tag = "legacy, removed" if legacy else ("ok" if 3 <= t1 <= 7 else "SHORT")
    ctag = "legacy, removed" if legacy else ("ok" if cov >= 93 else "SHORT")
    return [Figure(f"{label}: Type-I at 5%", t1, "%", f"3-7: {tag}"), Figure(f"{label}: coverage at 95%", cov, "%", f">= 93: {ctag}")]


DEFAULT_REPLICATIONS = 1000
QUICK_REPLICATIONS = 150


def bench_stats(quick: bool = False, replications: int | None = None) -> list[Figure]:
    """The simulation table (fixed seeds): every selectable method x design x data model, then the
    round-two scenarios (``stats_robust``), round three (``stats_limits``) and the shipped gate under
    catastrophic prompts (``stats_catastrophic``). ``replications`` data
    sets per t row (default 1000, 150 with ``quick``); bootstrap and legacy rows use a quarter of
    that (at least 100)."""
    from voxledger.bench_sections.stats_catastrophic import bench_catastrophic
    from voxledger.bench_sections.stats_limits import bench_limits
    from voxledger.bench_sections.stats_robust import bench_robust
    from voxledger.bench_sections.stats_sweep import sweep_gate_rows

    reps = replications or (QUICK_REPLICATIONS if quick else DEFAULT_REPLICATIONS)
    boot_reps = max(100, reps // 4)
    figures: list[Figure] = []
    runs: list[tuple[str, Callable[[], Rates], bool]] = []
    for name, k, seeds in EVAL_DESIGNS:
        for data in ("heterogeneous", "skewed", "heavy"):
            runs.append((f"eval cluster_t, {name}, {data}", partial(eval_rates, StatisticsSettings(), k, seeds, data, reps, 1), False))
            boot = StatisticsSettings(interval="cluster_bootstrap_t", bootstrap_resamples=999)
            runs.append((f"eval cluster_bootstrap_t, {name}, {data}", partial(eval_rates, boot, k, seeds, data, boot_reps, 1), False))
            if data != "heavy":
                runs.append(
                    (
                        f"eval row Wilcoxon + percentile bootstrap, {name}, {data}",
                        partial(legacy_eval_rates, k, seeds, data, boot_reps, 1),
                        True,
                    )
                )
    for name, raters, prompts, per_prompt in LISTEN_DESIGNS:
        for skewed in (False, True):
            data = "skewed" if skewed else "heterogeneous"
            d = (raters, prompts, per_prompt)
            runs.append((f"listening {LISTEN_METHOD}, {name}, {data}", partial(listening_rates, d, skewed, reps, 2), False))
            runs.append(
                (
                    f"listening row Wilcoxon + rater bootstrap, {name}, {data}",
                    partial(listening_rates, d, skewed, boot_reps, 2, legacy=True),
                    True,
                )
            )
    for label, run, legacy in runs:
        figures += _figures(label, run(), legacy)
    return figures + bench_robust(reps) + bench_limits(reps) + bench_catastrophic(reps) + sweep_gate_rows(max(40, reps // 4), seed=41)
