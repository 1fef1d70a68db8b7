"""``voxledger init`` reads the corpus language: a Mandarin corpus gets plans that measure Mandarin."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.evaluation import EvaluationPlan
from voxledger.schemas.promotion import PromotionPolicy
from voxledger.tasks.corpus.demo_zh import build_mandarin_corpus
from voxledger.tasks.plans import load_plan
from voxledger.tasks.plans_init import init_plans, language_settings


@pytest.fixture(scope="module")
def mandarin_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Mandarin demo corpus with the usual split names (the target's own splits renamed)."""
    root = tmp_path_factory.mktemp("zh")
    build_mandarin_corpus(root / "demo", size="full")  # 8 target dev clips: enough gate prompts for the paired rules
    corpus = root / "corpus"
    shutil.copytree(root / "demo" / "wavs", corpus / "wavs")
    rows = [json.loads(line) for line in (root / "demo" / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    renamed = {"target_train": "train", "target_dev": "dev"}
    text = "".join(json.dumps({**r, "split": renamed.get(r["split"], r["split"])}, ensure_ascii=False) + "\n" for r in rows)
    (corpus / "manifest.jsonl").write_text(text, encoding="utf-8")
    return corpus


def test_a_mandarin_corpus_gets_mandarin_measurements(mandarin_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "plans"
    init_plans(mandarin_corpus, out, target="zh-t1", base="train")
    audit = load_plan(out / "audit.yaml", AuditPolicy)
    asr = audit.asr_agreement.asr_spec()
    assert (asr.model_name, asr.language, audit.asr_agreement.normaliser_name()) == ("whisper-base-ct2", "zh", "zh")
    assert audit.asr_agreement.better_fit_margin == 0.25 and audit.validity.min_chars_per_s == 2.0
    evaluation = load_plan(out / "eval.yaml", EvaluationPlan)
    assert evaluation.metrics.asr.language == "zh" and evaluation.metrics.content_gate.unit == "by_language"
    assert {t.normaliser for t in evaluation.metrics.text} == {"zh", "zh_digits"}
    promotion = load_plan(out / "promote.yaml", PromotionPolicy)
    assert "cer:zh" in {r.metric for r in promotion.rules} and promotion.gate_plan.metrics.asr.language == "zh"
    assert all("wer:whisper_en" != r.metric for r in promotion.rules)


def test_english_keeps_every_default() -> None:
    english = language_settings("en-us")
    assert english.metrics == {} and english.content_metric == "wer:whisper_en" and english.validity == {}
    assert english.asr_agreement == {"enabled": True, "max_cer": 0.35, "severity": "warning", "fail_chance_ratio": 0.9}
    assert language_settings("ja").content_metric == "cer:basic" and language_settings("de").content_metric == "wer:basic"
