"""Evaluation in the corpus's language, end to end on real audio: Mandarin with CER, English on the multilingual model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.corpus_factory import build_small_corpus
from voxledger.schemas.evaluation import Candidate, EvaluationPlan, MetricSuite, Prompt
from voxledger.stores.home import Home
from voxledger.tasks.corpus.demo_plans import ZH_METRICS
from voxledger.tasks.corpus.demo_zh import build_mandarin_corpus
from voxledger.tasks.stages.evaluate import evaluate_plan_fn


def _recordings_plan(name: str, prompts: list[Prompt], reference: str, **fields: object) -> EvaluationPlan:
    return EvaluationPlan.model_validate(
        {
            "name": name,
            "prompts": prompts,
            "seeds": (0,),
            "candidates": (Candidate(name="recordings", backend="recordings", runtime="recordings"),),
            "baseline": "recordings",
            "speaker_references": {f"{p.id}:0": reference for p in prompts},
            **fields,
        }
    )


def _transcripts(home: Home, receipt: object) -> list[dict[str, object]]:
    sha = receipt.subject("transcripts").sha256  # type: ignore[attr-defined]
    return list(json.loads(home.blobs.get_bytes(sha)))


def test_mandarin_prompts_are_measured_by_cer_beside_seed_tts_eval(tmp_path: Path) -> None:
    corpus = tmp_path / "zh"
    build_mandarin_corpus(corpus, size="tiny")
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    target = [r for r in rows if r["speaker"] == "zh-t1"]
    prompts = [Prompt(id=f"z{i}", category="c", text=r["text"], recording=r["audio"]) for i, r in enumerate(target)]
    plan = _recordings_plan(
        "zh-eval", prompts, target[0]["audio"], metrics=MetricSuite.model_validate({**ZH_METRICS, "mos": None}), profile="seed-tts-eval"
    )
    home = Home(tmp_path / "h")
    r = evaluate_plan_fn(home, plan, plan_name="zh-eval.yaml", corpus=corpus).receipt
    overall = r.result.summaries[0].overall
    assert {"cer:zh", "cer:zh_digits", "cer:seedtts_zh", "wer:zh", "content_gate_pass", "speaker_sim"} <= set(overall)
    assert "wer:whisper_en" not in overall
    assert (
        r.parameters.extractor_specs["asr"]["model_name"] == "whisper-base-ct2" and r.parameters.extractor_specs["asr"]["language"] == "zh"
    )
    assert r.result.profile == "seed-tts-eval"
    deviations = "\n".join(r.result.deviations)
    assert "ASR for zh: whisper-base-ct2 instead of paraformer-zh" in deviations
    assert "speaker similarity: spkrec-ecapa-voxceleb instead of wavlm-large-sv" in deviations
    assert "failed generations: counted here" in deviations and "text for zh" not in deviations  # seedtts_zh is measured
    assert r.result.failures is not None and "recordings 0/" in r.result.failures
    heard = _transcripts(home, r)
    assert len(heard) == len(prompts) and {t["language"] for t in heard} == {"zh"} and all(t["text"] for t in heard)
    from voxledger.dashboards.report import build_dashboard

    page = build_dashboard(home.catalog, tmp_path / "dashboard.html", blobs=home.blobs.get_bytes).read_text()
    assert "Beside the seed-tts-eval protocol" in page and "ASR for zh: whisper-base-ct2 instead of paraformer-zh" in page


def test_the_multilingual_model_on_english_prompts_says_which_model_it_used(tmp_path: Path) -> None:
    corpus = build_small_corpus(tmp_path / "en")
    texts = ["Kick the ball straight and follow through.", "Help the woman get back to her feet."]
    prompts = [Prompt(id=f"p{i}", category="c", text=t, recording=f"wavs/spk_t_{i}.wav") for i, t in enumerate(texts)]
    suite = MetricSuite.model_validate({"asr": {"model_name": "whisper-base-ct2", "language": "detect"}, "mos": None})
    plan = _recordings_plan("en-base", prompts, "wavs/spk_t_4.wav", metrics=suite)
    home = Home(tmp_path / "h")
    r = evaluate_plan_fn(home, plan, plan_name="en-base.yaml", corpus=corpus).receipt
    assert r.parameters.extractor_specs["asr"]["model_name"] == "whisper-base-ct2"
    assert r.result.summaries[0].overall["wer:whisper_en"].mean < 0.5
    heard = _transcripts(home, r)
    assert {t["language"] for t in heard} == {"en"} and all(isinstance(t["language_probability"], float) for t in heard)


def test_a_plan_in_chinese_with_the_english_model_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="multilingual ASR model"):
        _recordings_plan("x", [Prompt(id="z", category="c", text="你好。", recording="a.wav", language="zh")], "a.wav")
