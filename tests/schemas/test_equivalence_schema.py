"""Equivalence schema: band rules, plan validation, result/report consistency, JSON round trips."""

from __future__ import annotations

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voxledger.schemas.equivalence import (
    BAND_ORDER,
    DEFAULT_STAGES,
    EquivalenceBands,
    EquivalencePlan,
    EquivalenceReport,
    StageResult,
    StageSpec,
    worst_band,
)


def float_result(stage: str = "mel", rel: float = 0.0, band: str = "GREEN") -> StageResult:
    return StageResult(
        stage=stage,
        kind="mel",
        ref_shape=(10, 80),
        cand_shape=(10, 80),
        ref_dtype="float32",
        cand_dtype="float32",
        ref_len=10,
        cand_len=10,
        n_compared=800,
        band=band,
        max_abs_err=rel * 4,
        rel=rel,
        mean_abs_err=rel,
        ref_max_abs=4.0,
        worst_index=(0, 0),
    )


def token_result(equal: bool = True) -> StageResult:
    return StageResult(
        stage="tokens",
        kind="tokens",
        ref_shape=(5,),
        cand_shape=(5,),
        ref_dtype="int32",
        cand_dtype="int32",
        ref_len=5,
        cand_len=5,
        n_compared=5,
        band="GREEN" if equal else "RED",
        tokens_equal=equal,
        first_divergence=None if equal else 2,
        ref_token=None if equal else 7,
        cand_token=None if equal else 8,
        n_token_mismatches=0 if equal else 1,
    )


def test_default_bands_match_the_published_thresholds() -> None:
    bands = EquivalenceBands()
    assert (bands.green_max_rel, bands.yellow_max_rel) == (1e-2, 1e-1)
    assert [bands.band_for(r) for r in (0.0, 0.01, 0.0100001, 0.1, 0.1000001)] == [
        "GREEN",
        "GREEN",
        "YELLOW",
        "YELLOW",
        "RED",
    ]


@pytest.mark.parametrize(
    ("green", "yellow", "message"),
    [
        (0.1, 0.1, "must be below yellow_max_rel"),
        (0.2, 0.1, "must be below yellow_max_rel"),
        (0.0, 0.1, "greater than 0"),
        (-1.0, 0.1, "greater than 0"),
        (float("nan"), 0.1, "finite number"),
        (0.01, float("inf"), "finite number"),
    ],
)
def test_bad_bands_are_rejected(green: float, yellow: float, message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        EquivalenceBands(green_max_rel=green, yellow_max_rel=yellow)


@settings(max_examples=100, deadline=None)
@given(a=st.floats(0, 10, allow_nan=False), b=st.floats(0, 10, allow_nan=False))
def test_band_for_is_monotone(a: float, b: float) -> None:
    bands = EquivalenceBands()
    low, high = sorted((a, b))
    assert BAND_ORDER[bands.band_for(low)] <= BAND_ORDER[bands.band_for(high)]


def test_models_are_frozen_and_forbid_unknown_fields() -> None:
    bands = EquivalenceBands()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        bands.green_max_rel = 0.5  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        EquivalencePlan(drift_window=3)  # type: ignore[call-arg]


def test_default_plan_holds_every_default() -> None:
    plan = EquivalencePlan()
    assert plan.stages == DEFAULT_STAGES and plan.drift_windows == 8
    assert [(s.name, s.kind, s.cols, s.required) for s in plan.stages] == [
        ("tokens", "tokens", None, True),
        ("mel", "mel", 80, True),
        ("pcm", "pcm", None, True),
        ("logits", "logits", None, False),
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "tokens", "kind": "tokens", "allow_length_mismatch": True}, "mel and pcm only"),
        ({"name": "logits", "kind": "logits", "allow_length_mismatch": True}, "mel and pcm only"),
        ({"name": "pcm", "kind": "pcm", "cols": 2}, "1-D; remove cols"),
        ({"name": "mel", "kind": "mel"}, "mel needs cols"),
        ({"name": "Mel.v2", "kind": "mel", "cols": 80}, "should match pattern"),
        ({"name": "mel", "kind": "spectrogram", "cols": 80}, "Input should be 'tokens'"),
    ],
)
def test_bad_stage_specs_are_rejected(spec: dict[str, object], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        StageSpec.model_validate(spec)


def test_plan_rejects_duplicate_and_empty_stages() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"repeated: \['pcm'\]"):
        EquivalencePlan(stages=(StageSpec(name="pcm", kind="pcm"),) * 2)
    with pytest.raises(pydantic.ValidationError, match="at least 1 item"):
        EquivalencePlan(stages=())


def test_stage_result_fields_must_match_kind() -> None:
    with pytest.raises(pydantic.ValidationError, match="rel is required for mel"):
        StageResult.model_validate({**float_result().model_dump(), "rel": None})
    with pytest.raises(pydantic.ValidationError, match="band GREEN contradicts tokens_equal=False"):
        StageResult.model_validate({**token_result(False).model_dump(), "band": "GREEN"})
    with pytest.raises(pydantic.ValidationError, match="rel must be None for tokens"):
        StageResult.model_validate({**token_result().model_dump(), "rel": 0.0})


def test_report_band_is_the_worst_stage_and_red_fails() -> None:
    bands = EquivalenceBands()
    ok = EquivalenceReport.from_stages([token_result(), float_result(rel=0.05, band="YELLOW")], bands)
    assert ok.band == "YELLOW" and ok.passed
    bad = EquivalenceReport.from_stages([token_result(False), float_result()], bands)
    assert bad.band == "RED" and not bad.passed
    assert worst_band([]) == "GREEN"


def test_report_refuses_inconsistent_verdicts() -> None:
    report = EquivalenceReport.from_stages([float_result(rel=0.05, band="YELLOW")], EquivalenceBands())
    data = report.model_dump()
    with pytest.raises(pydantic.ValidationError) as caught:
        EquivalenceReport.model_validate({**data, "band": "GREEN", "passed": True})
    assert "not the worst stage band YELLOW" in str(caught.value)
    wrong_stage = float_result(rel=0.05, band="GREEN")
    with pytest.raises(pydantic.ValidationError, match="does not match rel 0.05"):
        EquivalenceReport.from_stages([wrong_stage], EquivalenceBands())
    with pytest.raises(pydantic.ValidationError, match="passed=False contradicts band YELLOW"):
        EquivalenceReport.model_validate({**data, "passed": False})
    with pytest.raises(pydantic.ValidationError, match="at least 1 item"):
        EquivalenceReport.from_stages([], EquivalenceBands())


def test_report_json_round_trip() -> None:
    report = EquivalenceReport.from_stages(
        [token_result(False), float_result(rel=0.002)],
        EquivalenceBands(),
        unplanned=["cand:x.npy"],
    )
    assert EquivalenceReport.model_validate_json(report.model_dump_json()) == report
