"""The demo gates bound newly failed prompts, and say before they run what their size cannot resolve."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxledger.schemas.evaluation import Prompt
from voxledger.schemas.promotion import PAIRED_STATISTICS, PromotionPolicy
from voxledger.tasks.corpus.demo_plans import plans
from voxledger.tasks.evaluation.catastrophic import failure_margin, failure_pass_probability, passable_failures, resolution

TAIL_3 = 0.05 / 3 / 2  # one-sided, per challenger, in a 3-challenger round


@pytest.mark.parametrize(
    ("name", "metric", "margin"), [("promote-demo.yaml", "wer:whisper_en", 0.15), ("promote-demo-zh.yaml", "cer:zh", 0.39)]
)
def test_the_demo_gates_bound_newly_failed_prompts_and_drop_the_mean_rule(name: str, metric: str, margin: float) -> None:
    policy = PromotionPolicy.model_validate(plans()[name])
    content = {r.statistic: r.threshold for r in policy.rules if r.metric == metric}
    assert content == {"new_failure_rate_high": margin, "kept_delta_high": 0.15}
    assert not any(r.statistic in PAIRED_STATISTICS for r in policy.rules if r.metric == metric)


def test_failure_rule_pass_probability_is_exact_binomial() -> None:
    # 36 prompts, margin 0.15: only 0 newly failed prompts pass (1 of 36 gives an upper end of 0.175)
    assert passable_failures(36, TAIL_3, 0.15) == 0
    assert failure_pass_probability(0.15, 36, TAIL_3, 0.15) == pytest.approx(0.85**36)  # 0.29%, under the 0.83% bound
    assert failure_pass_probability(0.05, 36, TAIL_3, 0.15) == pytest.approx(0.95**36)  # 15.8%: 5% is below what 36 resolve
    assert passable_failures(36, TAIL_3, 0.12) == -1 and failure_pass_probability(0.0, 36, TAIL_3, 0.12) == 0.0
    assert failure_margin(36, 0.95, 3) == 0.15 and failure_margin(20, 0.95, 3) == 0.22 and failure_margin(36, 0.95, 7) == 0.15


def _policy(prompts: int, margin: float) -> PromotionPolicy:
    doc = plans()["promote-demo.yaml"]
    gate = {**doc["gate_plan"], "prompts": [Prompt(id=f"p{i:03d}", category="c", text="t").model_dump() for i in range(prompts)],
            "speaker_references": {}}  # fmt: skip
    rules = [{**r, "threshold": margin} if r["statistic"] == "new_failure_rate_high" else r for r in doc["rules"]]
    return PromotionPolicy.model_validate({**doc, "gate_plan": gate, "rules": rules})


def test_the_gate_says_at_plan_time_what_its_size_cannot_resolve() -> None:
    said = resolution(PromotionPolicy.model_validate(plans()["promote-demo.yaml"])) or ""
    assert "with 36 gate prompts no rule can hold 0.83% against a challenger failing 5% of prompts" in said
    assert "15.8% of gate evaluations; 94 prompts would" in said
    assert "passes it 15.8% of the time" in said
    # 150 prompts and a margin of 0.04 (floor 0.031): a 5% challenger passes 0.95^150 = 0.05%
    assert "the gate holds 0.83% against a challenger failing 5% of prompts" in (resolution(_policy(150, 0.04)) or "")
    # 150 prompts could, but a margin of 0.15 lets 5% through
    assert "could hold 0.83%" in (resolution(_policy(150, 0.15)) or "")


def test_plan_check_prints_what_the_demo_gate_resolves(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from voxledger.cli import main

    policy = Path(__file__).resolve().parents[2] / "voxledger" / "plans" / "promote-demo.yaml"
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "plan", "check", str(policy)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "catastrophic prompts: with 36 gate prompts no rule can hold 0.83%" in result.output


# Per-prompt WER (whisper_en, seed 0) of the gate evaluation 03e4d86b51be that promoted epoch47 in the
# demo run of commit ea8250e (promotion 5468bb6f32ab), in prompt order: a healthy checkpoint of the
# tiny demo model against the base, read from the catalog's observations table.
DEMO_INCUMBENT = [0.4, 0.6667, 0.5714, 0.25, 0.3636, 0.2222, 0.125, 0.6, 0.2857, 1.0, 0.7143, 0.3333, 0.25, 0.3333, 0.5714, 0.25, 0.1111,
                  0.125, 0.7778, 0.7143, 0.1111, 0.5, 0.1429, 0.125, 0.5, 0.2857, 0.1111, 0.5, 0.0, 0.0, 0.3333, 0.7778, 0.125, 0.7778,
                  0.375, 0.1429]  # fmt: skip
DEMO_EPOCH47 = [0.5, 1.0, 0.8571, 0.25, 0.5455, 0.1111, 0.375, 0.8, 0.5714, 0.4286, 0.8571, 0.3333, 0.125, 0.1667, 0.7143, 0.25, 0.2222,
                0.125, 0.5556, 1.1429, 0.0, 0.375, 0.2857, 0.125, 0.0, 0.5714, 0.0, 0.4, 0.1429, 0.5, 0.1111, 0.3333, 0.625, 0.4444, 0.5,
                0.2857]  # fmt: skip


def test_the_demo_gate_fails_prompts_against_the_pair_so_noise_is_not_a_failure() -> None:
    """Under the level rule (WER >= 0.5) the noisy tiny model 'newly fails' 7 of 36 prompts by noise and
    no healthy checkpoint could pass; the shipped gate counts a prompt failed when the challenger is
    0.6 worse on it, so the recorded healthy checkpoint passes both content rules, and a catastrophic
    prompt (+0.8) still counts."""
    from voxledger.schemas.evaluation import StatisticsSettings
    from voxledger.schemas.promotion import PromotionPolicy
    from voxledger.tasks.corpus.demo_plans import plans
    from voxledger.tasks.evaluation.stats import failure_split
    from voxledger.tasks.power import round_confidence

    policy = PromotionPolicy.model_validate(plans()["promote-demo.yaml"])
    gate = policy.gate_plan.statistics
    assert (gate.failure_rule, gate.failure_threshold) == ("increase", 0.6)
    st = gate.model_copy(update={"confidence": round_confidence(gate.confidence, 3)})

    def pairs(values: list[float]) -> dict[tuple[str, int], float]:
        return {(f"p{i:02d}", 0): v for i, v in enumerate(values)}

    level = failure_split(pairs(DEMO_EPOCH47), pairs(DEMO_INCUMBENT), StatisticsSettings(confidence=st.confidence))
    assert level.new_failures.mean * 36 == 7 and (level.new_failures.high or 0) > 0.15  # the level rule refuses it
    split = failure_split(pairs(DEMO_EPOCH47), pairs(DEMO_INCUMBENT), st)
    rules = {r.statistic: r.threshold for r in policy.rules}
    assert split.new_failures.mean == 0 and (split.new_failures.high or 1) <= rules["new_failure_rate_high"]
    assert split.kept.high is not None and split.kept.high <= rules["kept_delta_high"]
    worse = [*DEMO_EPOCH47[:-1], DEMO_INCUMBENT[-1] + 0.8]  # one catastrophic prompt
    assert failure_split(pairs(worse), pairs(DEMO_INCUMBENT), st).new_failures.mean * 36 == 1
