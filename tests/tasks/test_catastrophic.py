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
