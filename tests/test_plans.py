"""Every shipped plan validates, starts with the command that runs it, and has a stable identity."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.equivalence import EquivalencePlan
from voxledger.schemas.evaluation import EvaluationPlan
from voxledger.schemas.listening import ListeningProtocol
from voxledger.schemas.pipeline import PipelinePlan
from voxledger.schemas.promotion import PromotionPolicy
from voxledger.schemas.sweep import SweepPlan
from voxledger.schemas.training import TrainingPlan
from voxledger.tasks.plans import load_plan, plan_digest

PLANS = Path(__file__).resolve().parents[1] / "plans"
MODELS = {"audit_policy": AuditPolicy, "training_plan": TrainingPlan, "promotion_policy": PromotionPolicy, "evaluation_plan": EvaluationPlan,
          "listening_protocol": ListeningProtocol, "pipeline_plan": PipelinePlan, "sweep_plan": SweepPlan}  # fmt: skip


def test_every_plan_validates_and_names_its_command() -> None:
    files = sorted(PLANS.glob("*.yaml"))
    assert len(files) == 18, f"found {[f.name for f in files]}: update this count deliberately"
    for f in files:
        assert f.read_text().startswith("# voxledger "), f"{f.name} must start with a comment giving the command that runs it"
        kind = yaml.safe_load(f.read_text()).get("kind")
        model = MODELS.get(kind, EquivalencePlan)
        load_plan(f, model)  # type: ignore[type-var]


def test_the_demo_sweep_names_plans_beside_it() -> None:
    from voxledger.tasks.plans import PlanRef
    from voxledger.tasks.stages.sweep import beside, members

    plan = PlanRef.load(PLANS / "sweep-demo.yaml", SweepPlan)
    training, policy = beside(plan, PLANS)  # the training plan, the policy and every member's plan validate
    assert (training.source_name, policy.source_name, len(members(plan, training))) == ("train-tiny-lora.yaml", "promote-demo.yaml", 6)


def test_plan_identity_ignores_comments_and_key_order(tmp_path: Path) -> None:
    src = PLANS / "train-tiny-lora.yaml"
    doc = yaml.safe_load(src.read_text())
    shuffled = tmp_path / "x.yaml"
    shuffled.write_text("# another comment\n" + yaml.safe_dump(dict(reversed(list(doc.items())))))
    assert plan_digest(load_plan(src, TrainingPlan)) == plan_digest(load_plan(shuffled, TrainingPlan))
    doc["seed"] = 1
    shuffled.write_text(yaml.safe_dump(doc))
    assert plan_digest(load_plan(src, TrainingPlan)) != plan_digest(load_plan(shuffled, TrainingPlan))


def test_hard_cases_cover_the_categories() -> None:
    plan = load_plan(PLANS / "eval-hard-cases.yaml", EvaluationPlan)
    assert {p.category for p in plan.prompts} == {"numbers", "dates", "currency", "names", "long_form", "questions"}


def test_a_gate_rule_on_an_unknown_metric_is_refused_when_the_plan_loads(tmp_path: Path) -> None:
    import pytest

    from voxledger.schemas.errors import PlanError
    from voxledger.tasks.metrics.registry import rule_metric_ids
    from voxledger.tasks.plans import check_plan

    valid = rule_metric_ids()
    # 15 registered metrics; the 4 text families have one member per normaliser (3): 11 + 4 x 3
    assert len(valid) == 39 and {"wer:whisper_en", "cer:basic", "speaker_sim", "content_gate_pass"} <= set(valid)
    doc = yaml.safe_load((PLANS / "promote-demo.yaml").read_text())
    doc["rules"][1]["metric"] = "wer"  # a family without its normaliser
    doc["rules"][2]["metric"] = "speaker_similarity"
    bad = tmp_path / "promote-typo.yaml"
    bad.write_text("# voxledger promote RUN --policy promote-typo.yaml\n" + yaml.safe_dump(doc))
    with pytest.raises(PlanError) as caught:
        load_plan(bad, PromotionPolicy)
    message = str(caught.value)
    assert "2 problem(s)" in message and "rules.1.metric: 'wer' is not a registered metric id" in message
    assert "rules.2.metric: 'speaker_similarity'" in message and "wer:whisper_en" in message and "rules.0" not in message
    with pytest.raises(PlanError, match="promotion policy p.yaml: 2 problem"):
        check_plan(PromotionPolicy.model_validate(doc), "promotion policy p.yaml")  # what promote_adapter_fn checks first


def test_a_plan_that_is_a_device_or_a_fifo_is_refused_without_reading_it(tmp_path: Path) -> None:
    """`--policy /dev/zero` streamed zeros until memory ran out, a FIFO blocked forever: a plan is a regular file."""
    import os

    from voxledger.schemas.audit import AuditPolicy
    from voxledger.schemas.errors import PlanError
    from voxledger.tasks.equivalence.compare import load_equivalence_plan
    from voxledger.tasks.plans import load_plan

    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    for path, kind in ((Path("/dev/zero"), "a device"), (fifo, "a FIFO")):
        with pytest.raises(PlanError, match=f"is {kind}, not a regular file"):
            load_plan(path, AuditPolicy)
        with pytest.raises(PlanError, match=f"is {kind}, not a regular file"):
            load_equivalence_plan(path)
