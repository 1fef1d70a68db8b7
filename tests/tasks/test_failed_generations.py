"""A failed generation counts as a failure of its candidate on its prompt; invalid_rate is a gate metric."""

from __future__ import annotations

import numpy as np

from voxledger.schemas.evaluation import INVALID_RATE, Candidate, EvaluationPlan, Generation, MetricSuite, Observation, Prompt
from voxledger.schemas.promotion import GateRule
from voxledger.tasks.corpus.demo_plans import plans
from voxledger.tasks.evaluation.failed import INVALID_RATE_SHA256, with_failures
from voxledger.tasks.stages.evaluate import summarise
from voxledger.tasks.stages.promote import judge

PROMPTS = 36
WER_SHA, GATE_SHA, SIM_SHA = "1" * 64, "2" * 64, "3" * 64


def _plan() -> EvaluationPlan:
    return EvaluationPlan(
        name="p",
        prompts=tuple(Prompt(id=f"p{i:02d}", category="c", text="say this") for i in range(PROMPTS)),
        seeds=(0,),
        candidates=(
            Candidate(name="incumbent", backend="tiny", runtime="base", artifact="0" * 64, speaker="s"),
            Candidate(name="epoch3", backend="tiny", runtime="adapter", artifact="0" * 64, base="0" * 64, speaker="s"),
        ),
        baseline="incumbent",
        metrics=MetricSuite(speaker=None, mos=None),
    )


def _rows(valid_prompts: int) -> tuple[list[Generation], list[Observation]]:
    """The incumbent speaks every prompt (WER ~0.2); the challenger only the first ``valid_prompts``, well (WER ~0.05)."""
    rng = np.random.default_rng(0)
    gens, obs = [], []
    for cand, valid, wer in (("incumbent", PROMPTS, 0.2), ("epoch3", valid_prompts, 0.05)):
        for i in range(PROMPTS):
            ok = i < valid
            gens.append(Generation(candidate=cand, prompt_id=f"p{i:02d}", seed=0, valid=ok, error=None if ok else "no audio"))
            if not ok:
                continue
            row = {"candidate": cand, "prompt_id": f"p{i:02d}", "category": "c", "seed": 0}
            obs += [
                Observation(**row, metric="wer:basic", value=float(abs(wer + rng.normal(0, 0.05))), extractor_sha256=WER_SHA),
                Observation(**row, metric="content_gate_pass", value=1.0, extractor_sha256=GATE_SHA),
                Observation(**row, metric="speaker_sim", value=float(0.5 + (0.2 if cand == "epoch3" else 0) + rng.normal(0, 0.02)),
                            extractor_sha256=SIM_SHA),
            ]  # fmt: skip
    return gens, obs


def _judged(rules: list[GateRule], valid_prompts: int) -> list[bool]:
    result = summarise(_plan(), *_rows(valid_prompts))
    comparisons = {(c.candidate, c.metric): c for c in result.comparisons}
    means = {(s.candidate, m): iv for s in result.summaries for m, iv in s.overall.items()}
    return [judge(r, "epoch3", comparisons, means, 5).passed for r in rules]


def _demo_rules() -> list[GateRule]:
    rules = [GateRule.model_validate(r) for r in plans()["promote-demo.yaml"]["rules"]]
    return [r.model_copy(update={"metric": "wer:basic"}) if r.metric.startswith("wer:") else r for r in rules]


def test_a_challenger_with_valid_audio_on_7_of_36_prompts_never_passes() -> None:
    rules = [*_demo_rules(), GateRule(metric="wer:basic", statistic="delta_mean", op="<=", threshold=0.0)]
    passed = _judged(rules, valid_prompts=7)
    # the kept-prompt delta reads only the prompts neither side failed (7 here), so it may pass by design;
    # every other content rule reads the failures and fails
    judged = {f"{r.statistic}({r.metric})": p for r, p in zip(rules, passed, strict=True)}
    assert judged.pop("kept_delta_high(wer:basic)") is True
    assert not any(p for name, p in judged.items() if "speaker_sim" not in name)
    result = summarise(_plan(), *_rows(7))
    summary = {s.candidate: s for s in result.summaries}["epoch3"]
    # 29 failed prompts count as content-gate failures and 100% WER, over all 36 prompts
    assert summary.overall["content_gate_pass"].mean == 7 / 36
    assert summary.overall["content_gate_pass"].units == 36
    assert summary.overall["wer:basic"].units == 36
    assert summary.content_gate_fail_rate == 29 / 36
    assert summary.overall[INVALID_RATE].mean == 29 / 36


def test_the_same_challenger_with_all_audio_valid_passes() -> None:
    assert all(_judged(_demo_rules(), valid_prompts=PROMPTS))


def test_the_demo_policy_bounds_invalid_rate() -> None:
    rules = [r for r in _demo_rules() if r.metric == INVALID_RATE]
    assert len(rules) == 1
    assert _judged(rules, valid_prompts=PROMPTS) == [True]
    assert _judged(rules, valid_prompts=30) == [False]  # 6 of 36 failed: 17%


def test_invalid_rate_is_compared_like_a_rate() -> None:
    result = summarise(_plan(), *_rows(30))
    comp = {(c.candidate, c.metric): c for c in result.comparisons}[("epoch3", INVALID_RATE)]
    assert comp.lower_is_better
    assert comp.delta.method == "newcombe_paired"
    assert comp.delta.mean == 6 / 36


def test_stand_ins_only_for_failed_rows_and_measured_metrics() -> None:
    gens, obs = _rows(34)
    out = with_failures(_plan(), gens, obs)
    added = out[len(obs) :]
    assert sum(o.metric == INVALID_RATE for o in added) == 2 * PROMPTS
    assert all(o.extractor_sha256 == INVALID_RATE_SHA256 for o in added if o.metric == INVALID_RATE)
    stand_ins = sorted((o.prompt_id, o.metric, o.value) for o in added if o.metric != INVALID_RATE)
    # speaker similarity gets no stand-in: there is no honest similarity of silence
    assert stand_ins == [(p, m, v) for p in ("p34", "p35") for m, v in (("content_gate_pass", 0.0), ("wer:basic", 1.0))]
