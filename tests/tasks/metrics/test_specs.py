"""Metric specs: closed, frozen, fully pinned, and stable through JSON."""

from __future__ import annotations

import inspect
import json

import pytest
from pydantic import BaseModel, ValidationError

from voxledger.schemas import metrics
from voxledger.schemas.errors import EvaluationError
from voxledger.tasks.metrics import verify_engine

SPECS = [cls for _, cls in inspect.getmembers(metrics, inspect.isclass) if issubclass(cls, BaseModel) and cls.__name__.endswith("Spec")]
REQUIRED: dict[str, dict[str, str]] = {
    # a folder the user brings has no default: its name, location and digest are the user's
    "WavLMSpeakerSpec": {"model_name": "wavlm-large-sv", "model_dir": "/models/wavlm", "folder_sha256": "0" * 64},
}


def make(cls: type[BaseModel], **kw: object) -> BaseModel:
    """A spec with its defaults (and the fields that have none)."""
    return cls(**REQUIRED.get(cls.__name__, {}), **kw)


def test_every_spec_is_discovered_with_a_literal_name_and_version() -> None:
    names = {make(cls).name: make(cls).version for cls in SPECS}  # type: ignore[attr-defined]
    assert names == {
        "asr_faster_whisper": 1,
        "wer_cer": 1,
        "speaker_ecapa": 1,
        "speaker_wavlm_xvector": 1,
        "dnsmos_p835": 1,
        "audio_validity": 1,
        "content_gate": 1,
    }
    for cls in SPECS:
        schema = cls.model_json_schema()
        assert schema["properties"]["name"]["const"] == make(cls).name, cls.__name__  # type: ignore[attr-defined]
        assert schema["properties"]["version"]["const"] == 1, cls.__name__


@pytest.mark.parametrize("cls", SPECS, ids=lambda c: c.__name__)
def test_specs_are_frozen_closed_and_round_trip(cls: type[BaseModel]) -> None:
    spec = make(cls)
    with pytest.raises(ValidationError):
        spec.name = "other"  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="extra"):
        make(cls, unexpected_setting=1)
    assert cls.model_validate_json(spec.model_dump_json()) == spec
    assert hash(spec) == hash(cls.model_validate(json.loads(spec.model_dump_json())))


def test_json_schema_lists_every_normaliser() -> None:
    schema = metrics.TextMetricSpec.model_json_schema()
    assert schema["properties"]["normaliser"]["enum"] == ["whisper_en", "basic", "none", "zh", "zh_digits", "seedtts_en", "seedtts_zh"]


def test_pinned_defaults() -> None:
    asr = metrics.AsrSpec()
    assert (asr.model_name, asr.beam_size, asr.language, asr.temperature) == (
        "whisper-tiny.en-ct2",
        5,
        "en",
        0.0,
    )
    assert (asr.compute_type, asr.vad_filter, asr.temperature_fallback) == ("int8", False, False)
    assert metrics.SpeakerSpec().checkpoint_sha256 == ("0575cb64845e6b9a10db9bcb74d5ac32b326b8dc90352671d345e2ee3d0126a2")
    assert metrics.ContentGateSpec().text_metric == metrics.TextMetricSpec()


def test_normaliser_version_follows_the_normaliser_unless_given() -> None:
    assert metrics.TextMetricSpec(normaliser="none").normaliser_version == "identity:1"
    pinned = metrics.TextMetricSpec(normaliser="none", normaliser_version="identity:0")
    assert pinned.normaliser_version == "identity:0"


def test_validity_rate_bounds_must_be_ordered() -> None:
    with pytest.raises(ValidationError, match="min_chars_per_s < nominal_chars_per_s"):
        metrics.ValiditySpec(min_chars_per_s=20.0, nominal_chars_per_s=15.0)


def test_bad_digest_is_rejected() -> None:
    with pytest.raises(ValidationError):
        metrics.AsrSpec(model_sha256="ABC")


@pytest.mark.parametrize("cls", SPECS, ids=lambda c: c.__name__)
def test_engine_pins_match_the_installed_packages(cls: type[BaseModel]) -> None:
    engine = getattr(make(cls), "engine", None)
    if engine is not None:
        verify_engine(engine)


def test_engine_mismatch_names_both_versions() -> None:
    with pytest.raises(EvaluationError, match="jiwer==0.0.1 but jiwer==4.0.0 is installed"):
        verify_engine("jiwer==0.0.1")
    with pytest.raises(EvaluationError, match="not installed"):
        verify_engine("voxledger-no-such-dist==1.0")
