"""The listening protocol plan and the stimulus set: defaults, identity, and every problem listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.tasks.listening.conftest import DEMO_PLAN
from voxledger.schemas.errors import PlanError
from voxledger.schemas.listening import (
    ACR_SCALE,
    CMOS_SCALE,
    MUSHRA_SCALE,
    ListeningProtocol,
    Scale,
    StimulusSet,
)
from voxledger.tasks.plans import load_plan, plan_digest


def test_demo_plan_loads_with_all_three_tasks(protocol: ListeningProtocol) -> None:
    assert DEMO_PLAN.read_text().startswith("# voxledger packets export --plan plans/listening-demo.yaml")
    assert [(c.name, c.task) for c in protocol.criteria] == [("naturalness", "acr"), ("quality", "mushra"), ("preference", "ab")]
    acr, mushra, ab = protocol.criteria
    assert acr.scale == ACR_SCALE and [a.label for a in acr.scale.anchors] == ["Bad", "Poor", "Fair", "Good", "Excellent"]
    assert (mushra.scale.min, mushra.scale.max) == (0, 100) and mushra.low_anchor_cutoff_hz == 3500  # type: ignore[union-attr]
    assert ab.scale == CMOS_SCALE and (ab.scale.min, ab.scale.max) == (-3, 3)
    assert mushra.applies_to("news") and not mushra.applies_to("chat") and acr.applies_to("chat")
    assert protocol.screening.version == "voxledger.screening/1"


def test_identity_ignores_comments_and_spelled_out_defaults(tmp_path: Path, protocol: ListeningProtocol) -> None:
    minimal = tmp_path / "p.yaml"
    minimal.write_text(
        "kind: listening_protocol\nname: listening-demo\ntitle: Voice quality listening test\n"
        "criteria:\n"
        "  - name: naturalness\n    task: acr\n    question: How natural does this voice sound?\n"
        "  - name: quality\n    task: mushra\n    question: Rate the overall quality of each sample against the reference.\n"
        "    categories: [news]\n"
        "  - name: preference\n    task: ab\n    question: Which sample sounds more like a real person speaking?\n"
        "design: {seed: 7, comparison_gold_items: 1}\n"
    )
    assert plan_digest(load_plan(minimal, ListeningProtocol)) == plan_digest(protocol)


def test_bad_plan_lists_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\ncriteria:\n"
        "  - {name: naturalness, task: acr, question: Is it natural}\n"
        "  - {name: loudness, task: volume, question: Is it loud}\n"
        "design: {raters: 2, raters_per_prompt: 3}\n"
        "blinding: {pseudonym_hex_chars: 4}\n"
    )
    with pytest.raises(PlanError) as exc:
        load_plan(bad, ListeningProtocol)
    msg = str(exc.value)
    assert "3 problem(s)" in msg and "criteria.1" in msg and "raters_per_prompt 3 exceeds raters 2" in msg and "pseudonym_hex_chars" in msg


def test_cross_field_rules() -> None:
    acr = {"name": "naturalness", "task": "acr", "question": "How natural?"}
    with pytest.raises(ValidationError, match="criterion names repeat"):
        ListeningProtocol(name="x", criteria=[acr, acr])
    with pytest.raises(ValidationError, match="gold_items and attention_checks are ACR items"):
        ListeningProtocol(name="x", criteria=[{"name": "pref", "task": "ab", "question": "Which?"}])
    ListeningProtocol(
        name="x", criteria=[{"name": "pref", "task": "ab", "question": "Which?"}], design={"gold_items": 0, "attention_checks": 0}
    )
    with pytest.raises(ValidationError, match="comparison_gold_items are A/B items: add an ab criterion"):
        ListeningProtocol(name="x", criteria=[acr], design={"comparison_gold_items": 1})
    with pytest.raises(ValidationError, match="inside"):
        Scale(min=1, max=5, anchors=[{"value": 0, "label": "x"}, {"value": 5, "label": "y"}])
    assert MUSHRA_SCALE.contains(100) and not MUSHRA_SCALE.contains(100.5) and not ACR_SCALE.contains(6) and CMOS_SCALE.contains(-3)


def test_stimulus_set_refuses_repeats_and_inconsistent_prompts() -> None:
    s = {"prompt_id": "p1", "category": "news", "text": "Hello.", "candidate": "a", "seed": 0, "audio_sha256": "a" * 64}
    with pytest.raises(ValidationError) as exc:
        StimulusSet(evaluation_plan_sha256="e" * 64, stimuli=[s, s, s | {"candidate": "b", "text": "Other."}])
    assert "repeats prompt 'p1' candidate 'a'" in str(exc.value) and "different category or text" in str(exc.value)
