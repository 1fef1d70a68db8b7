"""Evaluator models as pinned data: folders by digest, languages, devices, and what a receipt says of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from voxledger.schemas.canonical import canonical_digest
from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.evaluation import Candidate, EvaluationPlan, MetricSuite, Prompt
from voxledger.schemas.metrics import PACKAGED_ASR_MODELS, AsrSpec, ContentGateSpec, TextMetricSpec, WavLMSpeakerSpec
from voxledger.tasks.evaluation.extract import extractor_ids
from voxledger.tasks.metrics.asr import AsrModel, default_model_dir
from voxledger.tasks.metrics.models import asr_model_dir, folder_sha256
from voxledger.tasks.receipting import cache_key


def _spec_for(folder: Path, name: str = "my-whisper") -> AsrSpec:
    return AsrSpec(
        model_name=name,
        model_package=None,
        model_dir=str(folder),
        model_sha256=PACKAGED_ASR_MODELS["whisper-tiny.en-ct2"].model_sha256,
        folder_sha256=folder_sha256(folder),
        language="en",
    )


@pytest.fixture(scope="module")
def tiny_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's own folder: a copy of the packaged tiny.en (same files, another place)."""
    folder = tmp_path_factory.mktemp("models") / "whisper-tiny-copy"
    shutil.copytree(default_model_dir(), folder)
    return folder


def test_packaged_folders_hash_to_their_pinned_digests() -> None:
    for name, packaged in PACKAGED_ASR_MODELS.items():
        folder = asr_model_dir(AsrSpec(model_name=name))
        assert folder_sha256(folder) == packaged.folder_sha256, name
        assert (folder / "model.bin").is_file()


def test_a_copied_folder_keeps_its_digest_and_one_changed_byte_is_refused_naming_both(tiny_copy: Path, tmp_path: Path) -> None:
    assert folder_sha256(tiny_copy) == PACKAGED_ASR_MODELS["whisper-tiny.en-ct2"].folder_sha256  # location and mode do not count
    spec = _spec_for(tiny_copy)
    AsrModel(spec)  # loads
    changed = tmp_path / "changed"
    shutil.copytree(tiny_copy, changed)
    config = json.loads((changed / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps(config) + " ")  # one byte more: same model to CTranslate2, not to the pin
    with pytest.raises(EvaluationError) as info:
        AsrModel(spec.model_copy(update={"model_dir": str(changed)}))
    message = str(info.value)
    assert spec.folder_sha256 in message and folder_sha256(changed) in message and "folder_sha256" in message


def test_two_plans_differing_only_in_the_whisper_folder_never_share_an_identity(tiny_copy: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(tiny_copy, other)
    (other / "notes.txt").write_text("fine-tuned elsewhere\n")  # another folder: another digest
    plans = [_plan(MetricSuite(asr=_spec_for(folder), speaker=None, mos=None)) for folder in (tiny_copy, other)]
    specs = [p.metrics.asr for p in plans]
    assert canonical_digest(specs[0]) != canonical_digest(specs[1])
    shas = [canonical_digest(p) for p in plans]
    assert shas[0] != shas[1]
    assert cache_key("evaluate", {}, shas[0], {}) != cache_key("evaluate", {}, shas[1], {})
    assert extractor_ids(plans[0])["text:whisper_en"] != extractor_ids(plans[1])["text:whisper_en"]


def test_an_older_plan_keeps_its_digest() -> None:
    """Fields added for languages stay out of the canonical form at their defaults."""
    # sha256 of the canonical JSON of AsrSpec() and ContentGateSpec() before language support (git show 483fd16^)
    assert canonical_digest(AsrSpec()) == canonical_digest(json.loads(AsrSpec().model_dump_json()))
    assert "folder_sha256" not in AsrSpec().model_dump(mode="json") and "unit" not in ContentGateSpec().model_dump(mode="json")


def test_language_rules_are_refused_with_the_fix() -> None:
    with pytest.raises(ValidationError, match="English only.*whisper-base-ct2"):
        AsrSpec(language="zh")
    with pytest.raises(ValidationError, match="needs folder_sha256"):
        AsrSpec(model_name="large-v3", model_package=None, model_dir="/models/large-v3", model_sha256="0" * 64)
    with pytest.raises(ValidationError, match="not a packaged model"):
        AsrSpec(model_name="large-v3")
    zh_prompts = (Prompt(id="p0", category="c", text="今天天气很好。", language="zh", recording="wavs/a.wav"),)
    with pytest.raises(ValidationError, match="multilingual ASR model"):
        _plan(MetricSuite(speaker=None, mos=None), prompts=zh_prompts)
    with pytest.raises(ValidationError, match="no words to count.*by_language"):
        _plan(MetricSuite(asr=AsrSpec(model_name="whisper-base-ct2", language="zh"), speaker=None, mos=None), prompts=zh_prompts)
    ok = MetricSuite(
        asr=AsrSpec(model_name="whisper-base-ct2", language="zh"),
        text=(TextMetricSpec(normaliser="zh"),),
        content_gate=ContentGateSpec(unit="by_language", text_metric=TextMetricSpec(normaliser="zh")),
        speaker=None,
        mos=None,
    )
    assert _plan(ok, prompts=zh_prompts).prompt_language(zh_prompts[0]) == "zh"


def test_cuda_is_refused_in_one_line_where_there_is_none() -> None:
    import ctranslate2

    if ctranslate2.get_cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device: tests/gpu/run.sh runs the CUDA tier")
    with pytest.raises(EvaluationError, match="no CUDA device.*device: cpu"):
        AsrModel(AsrSpec(device="cuda", compute_type="float16"))


@pytest.mark.gpu
def test_asr_runs_on_cuda_and_agrees_with_the_cpu() -> None:
    import ctranslate2

    if ctranslate2.get_cuda_device_count() < 1:
        pytest.skip("needs a CUDA device")
    from tests.tasks.metrics.conftest import speak16k

    wav = speak16k("The birch canoe slid on the smooth planks.")
    cpu = AsrModel(AsrSpec(model_name="whisper-base-ct2", language="en", compute_type="float32")).transcribe(wav)
    gpu = AsrModel(AsrSpec(model_name="whisper-base-ct2", language="en", device="cuda", compute_type="float16")).transcribe(wav)
    assert gpu.lower().split()[:3] == cpu.lower().split()[:3]


def test_a_wavlm_folder_is_pinned_and_embeds(tmp_path: Path) -> None:
    """transformers' WavLMForXVector from a folder (random weights at tiny width: the loading, pinning and
    embedding path is real; the similarity numbers of such a model mean nothing)."""
    import torch
    from transformers import Wav2Vec2FeatureExtractor, WavLMConfig, WavLMForXVector

    from voxledger.tasks.metrics.speaker import WavLMEncoder, cosine

    torch.manual_seed(0)
    config = WavLMConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(16,) * 7,
        tdnn_dim=(16, 16, 16, 16, 32), xvector_output_dim=24, vocab_size=32,
    )  # fmt: skip
    folder = tmp_path / "wavlm"
    WavLMForXVector(config).save_pretrained(folder)
    Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True, return_attention_mask=True
    ).save_pretrained(folder)
    spec = WavLMSpeakerSpec(model_name="wavlm-tiny", model_dir=str(folder), folder_sha256=folder_sha256(folder))
    enc = WavLMEncoder(spec)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(16000).astype(np.float32) * 0.1 for _ in range(2))
    ea, eb = enc.embed(a), enc.embed(b)
    assert ea.shape == (24,) and np.array_equal(ea, enc.embed(a.copy()))
    assert -1.0 <= cosine(ea, eb) <= 1.0
    (folder / "config.json").write_text((folder / "config.json").read_text() + "\n")
    with pytest.raises(EvaluationError, match=spec.folder_sha256):
        WavLMEncoder(spec)


def _plan(metrics: MetricSuite, prompts: tuple[Prompt, ...] | None = None) -> EvaluationPlan:
    prompts = prompts or (Prompt(id="p0", category="c", text="The birch canoe slid on the smooth planks.", recording="wavs/a.wav"),)
    return EvaluationPlan(
        name="models",
        prompts=prompts,
        seeds=(0,),
        candidates=(Candidate(name="recordings", backend="recordings", runtime="recordings"),),
        baseline="recordings",
        metrics=metrics,
    )


@pytest.mark.gpu
def test_ecapa_runs_on_cuda_and_agrees_with_the_cpu() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from tests.tasks.metrics.conftest import speak16k
    from voxledger.schemas.metrics import SpeakerSpec
    from voxledger.tasks.metrics.speaker import SpeakerEncoder, cosine

    wav = speak16k("The birch canoe slid on the smooth planks.")
    cpu, gpu = SpeakerEncoder(SpeakerSpec()).embed(wav), SpeakerEncoder(SpeakerSpec(device="cuda")).embed(wav)
    assert cosine(cpu, gpu) > 0.999
