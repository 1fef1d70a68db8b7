"""``voxledger bench --only stats``, round three: failed generations, float32 round-off, large listening families.

Every row runs the functions the stages call (``summarise``, ``judge``, ``paired_delta``,
``crossed_mean``, ``paired_deltas``) on data simulated with a fixed seed:

- *failed generations*: 36 gate prompts, the incumbent speaks all (WER ~0.2), the challenger has
  valid audio on 7 (WER ~0.05, similarity +0.2): how often it passes the demo policy's rules plus
  a ``delta_mean`` rule (goal 0).
- *float32 round-off*: a constant +0.1 WER delta computed in float32, and identical audio whose
  similarity moved by 0-3 float32 ulps, through each interval method: estimable (goal 0) and
  passing (goal 0); the same for a listening delta.
- *15-candidate listening family*: 15 MUSHRA candidates 5 points apart, 6 raters x 6 prompts,
  all 105 pairs in one Holm family: the share of pairs with a verdict (goal >= 80) and of
  verdicts for the lower-scored candidate (goal 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from voxledger.bench_sections.common import BENCH_BACKEND, Figure
from voxledger.schemas.evaluation import (
    Candidate,
    Comparison,
    EvaluationPlan,
    Generation,
    MetricSuite,
    Observation,
    Prompt,
    StatisticsSettings,
)
from voxledger.schemas.listening import Statistics
from voxledger.schemas.listening_receipts import RatingRow
from voxledger.schemas.promotion import GateRule
from voxledger.tasks.evaluation.stats import paired_delta
from voxledger.tasks.listening.stats import crossed_mean, paired_deltas
from voxledger.tasks.stages.evaluate import summarise
from voxledger.tasks.stages.promote import judge

GATE_PROMPTS = 36
SHAS = {"wer:basic": "1" * 64, "content_gate_pass": "2" * 64, "speaker_sim": "3" * 64}


def _zero(value: float) -> str:
    return "0: " + ("ok" if value == 0 else "SHORT")


def _gate_plan() -> EvaluationPlan:
    return EvaluationPlan(
        name="bench-gate",
        prompts=tuple(Prompt(id=f"p{i:02d}", category="c", text="say this") for i in range(GATE_PROMPTS)),
        seeds=(0,),
        candidates=(
            Candidate(name="incumbent", backend=BENCH_BACKEND, runtime="base", artifact="0" * 64, speaker="s"),
            Candidate(name="epoch3", backend=BENCH_BACKEND, runtime="adapter", artifact="0" * 64, base="0" * 64, speaker="s"),
        ),
        baseline="incumbent",
        metrics=MetricSuite(speaker=None, mos=None),
    )


def _failed_generation_data(rng: np.random.Generator, valid: int) -> tuple[list[Generation], list[Observation]]:
    gens, obs = [], []
    for cand, n_valid, wer, sim in (("incumbent", GATE_PROMPTS, 0.2, 0.5), ("epoch3", valid, 0.05, 0.7)):
        for i in range(GATE_PROMPTS):
            ok = i < n_valid
            gens.append(Generation(candidate=cand, prompt_id=f"p{i:02d}", seed=0, valid=ok))
            if ok:
                row: dict[str, Any] = {"candidate": cand, "prompt_id": f"p{i:02d}", "category": "c", "seed": 0}
                values = {"wer:basic": abs(wer + rng.normal(0, 0.05)), "content_gate_pass": 1.0, "speaker_sim": sim + rng.normal(0, 0.02)}
                obs += [Observation(**row, metric=m, value=float(v), extractor_sha256=SHAS[m]) for m, v in values.items()]
    return gens, obs


def failed_generation_rows(reps: int, seed: int) -> list[Figure]:
    """A challenger with valid audio on 7 of 36 prompts against the demo policy (+ a delta_mean rule)."""
    from voxledger.tasks.corpus.demo_plans import plans

    rules = [GateRule.model_validate(r) for r in plans()["promote-demo.yaml"]["rules"]]
    rules = [r.model_copy(update={"metric": "wer:basic"}) if r.metric.startswith("wer:") else r for r in rules]
    rules.append(GateRule(metric="wer:basic", statistic="delta_mean", op="<=", threshold=0.0))
    rng, plan = np.random.default_rng(seed), _gate_plan()
    passed = content = 0
    for _ in range(reps):
        result = summarise(plan, *_failed_generation_data(rng, 7))
        comparisons = {(c.candidate, c.metric): c for c in result.comparisons}
        means = {(s.candidate, m): iv for s in result.summaries for m, iv in s.overall.items()}
        judged = [judge(r, "epoch3", comparisons, means, 5) for r in rules]
        passed += all(j.passed for j in judged)
        content += all(j.passed for j in judged if j.metric != "speaker_sim")
    label = "failed generations, 7 of 36 valid (81% invalid)"
    return [
        Figure(f"{label}: passes the demo policy + delta_mean", 100 * passed / reps, "%", _zero(passed)),
        Figure(f"{label}: passes any content rule set", 100 * content / reps, "%", _zero(content)),
    ]


def _ulps(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = x.copy()
    for i, s in enumerate(rng.integers(-3, 4, x.size)):
        for _ in range(abs(int(s))):
            out[i] = np.nextafter(out[i], np.float32(np.sign(s) * np.inf))
    return out


def _pairs(values: np.ndarray) -> dict[tuple[str, int], float]:
    return {(f"p{i:02d}", 0): float(v) for i, v in enumerate(values)}


def float32_rows(reps: int, seed: int) -> list[Figure]:
    """Constant float32 deltas and float32 jitter through every interval method: never estimable, never passing."""
    figures = []
    for method in ("cluster_t", "cluster_bootstrap_t"):
        st = StatisticsSettings(interval=method, bootstrap_resamples=999)
        rng = np.random.default_rng(seed)
        estimable = passed = jitter_estimable = jitter_passed = 0
        high = GateRule(metric="wer:basic", statistic="delta_high", op="<=", threshold=0.15)
        low = GateRule(metric="speaker_sim", statistic="delta_low", op=">=", threshold=-0.02)
        for _ in range(reps):
            b = rng.beta(2, 10, 20).astype(np.float32)
            delta, test, n = paired_delta(_pairs(b + np.float32(0.1)), _pairs(b), st, metric="wer:basic")
            comp = Comparison(candidate="c", baseline="b", metric="wer:basic", delta=delta, test=test, n_pairs=n, lower_is_better=True)
            estimable += delta.low is not None or test.p_value is not None
            passed += judge(high, "c", {("c", "wer:basic"): comp}, {}).passed
            sim = (0.8 + rng.normal(0, 0.05, 20)).astype(np.float32)
            delta, test, n = paired_delta(_pairs(_ulps(sim, rng)), _pairs(sim), st, metric="speaker_sim")
            comp = Comparison(candidate="c", baseline="b", metric="speaker_sim", delta=delta, test=test, n_pairs=n, lower_is_better=False)
            jitter_estimable += delta.low is not None or test.p_value is not None
            jitter_passed += judge(low, "c", {("c", "speaker_sim"): comp}, {}).passed
        figures += [
            Figure(f"float32 constant +0.1 delta, {method}: estimable", 100 * estimable / reps, "%", _zero(estimable)),
            Figure(f"float32 constant +0.1 delta, {method}: passes delta_high <= 0.15", 100 * passed / reps, "%", _zero(passed)),
            Figure(f"float32 identical audio +-3 ulps, {method}: estimable", 100 * jitter_estimable / reps, "%", _zero(jitter_estimable)),
            Figure(
                f"float32 identical audio +-3 ulps, {method}: passes delta_low >= -0.02",
                100 * jitter_passed / reps,
                "%",
                _zero(jitter_passed),
            ),
        ]
    rng = np.random.default_rng(seed + 1)
    raters, prompts = [f"r{i % 6}" for i in range(60)], [f"p{i // 6}" for i in range(60)]
    listened = sum(
        crossed_mean(_ulps(np.full(60, 0.1, dtype=np.float32), rng).tolist(), raters, prompts, 0.95, resamples=200).p_value is not None
        for _ in range(reps)
    )
    figures.append(Figure("float32 listening delta +-3 ulps, 6 x 10 crossed: estimable", 100 * listened / reps, "%", _zero(listened)))
    return figures


def mushra_family_rows(reps: int, seed: int) -> list[Figure]:
    """15 MUSHRA candidates 5-70 points apart: the Holm family of 105 pairs."""
    rng = np.random.default_rng(seed)
    decided = wrong = total = 0
    for _ in range(reps):
        rows = []
        for r in range(6):
            bias = rng.normal(0, 3)
            for p in range(6):
                for c in range(15):
                    score = float(np.clip(np.round(20 + 5 * c + bias + rng.normal(0, 3)), 0, 100))
                    rows.append(RatingRow.model_construct(rater_id=f"r{r}", stimulus=f"s{r}{p}{c}", trial="t", role="stimulus",
                                                          task="mushra", criterion="q", candidate=f"c{c:02d}", prompt_id=f"p{p}",
                                                          category="x", score=score, audio_sha256="0" * 64, included=True))  # fmt: skip
        deltas = paired_deltas(rows, Statistics(seed=int(rng.integers(2**31))), {"q": "higher_better"})
        total += len(deltas)
        decided += sum(d.better is not None for d in deltas)
        wrong += sum(d.better is not None and d.better != max(d.a, d.b) for d in deltas)
    label = "15 MUSHRA candidates 5-70 points apart, 6 x 6, Holm over 105 pairs"
    return [
        Figure(f"{label}: pairs with a verdict", 100 * decided / total, "%", ">= 80"),
        Figure(f"{label}: verdicts for the lower-scored candidate", 100 * wrong / total, "%", _zero(wrong)),
    ]


def bench_limits(reps: int) -> list[Figure]:
    """Every round-three scenario (fixed seeds): failed generations, float32 round-off, a 105-pair family."""
    return (
        failed_generation_rows(max(20, reps // 20), seed=31)
        + float32_rows(max(20, reps // 10), seed=32)
        + mushra_family_rows(max(2, reps // 250), seed=33)
    )
