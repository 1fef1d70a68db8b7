"""The extractors voxledger ships, registered in the order they measure a generation.

Validity first; ASR once per generation (shared by the text metrics, the anchors and the content
gate); the content gate; then the secondary quality metrics, only on rows that passed the gate.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from voxledger.schemas.evaluation import MetricSuite
from voxledger.tasks.metrics.registry import ExtractorDef, Measurement, MetricDef, Values, register


def _language(m: Measurement) -> str:
    """The language the recogniser is told for this prompt (its own, else the ASR spec's)."""
    return str(m.prompt.language or m.suite.asr.language)


def transcript(m: Measurement) -> Any:
    """What the ASR model heard for this generation, and in which language (computed once)."""
    return m.shared("asr", lambda: m.models.asr.hear(m.wav, _language(m)))


def _hypothesis(m: Measurement) -> str:
    return str(transcript(m).text)


def gate(m: Measurement) -> Any:
    """The content-gate result of this generation (computed once)."""
    from voxledger.tasks.metrics.content_gate import content_gate

    language = _language(m)
    heard = transcript(m).language if language == "detect" else language
    return m.shared("gate", lambda: content_gate(m.text, _hypothesis(m), m.prompt.instruction, m.suite.content_gate, heard))


def _validity(m: Measurement, key: str, spec: BaseModel) -> Values:
    from voxledger.tasks.metrics.validity import audio_stats

    stats = audio_stats(m.wav, m.sample_rate_hz, m.suite.validity, text=m.text)
    out = {"duration_s": stats.duration_s, "silence_fraction": stats.silence_fraction, "clipping_fraction": stats.clipping_fraction}
    if stats.expected_duration_ratio is not None:
        out["expected_duration_ratio"] = stats.expected_duration_ratio
    return out


def _text(m: Measurement, key: str, spec: BaseModel) -> Values:
    from voxledger.tasks.metrics.textmetrics import score_text

    n = key.split(":", 1)[1]
    score = score_text(m.text, _hypothesis(m), spec)  # type: ignore[arg-type]
    return {
        f"wer:{n}": score.wer,
        f"cer:{n}": score.cer,
        f"word_errors:{n}": score.substitutions + score.deletions + score.insertions,
        f"ref_words:{n}": score.hits + score.substitutions + score.deletions,
    }


def _anchors(m: Measurement, key: str, spec: BaseModel) -> Values:
    from voxledger.tasks.metrics.normalise import basic

    if not m.prompt.anchors:
        return {}
    heard = f" {basic(_hypothesis(m))} "
    hits = sum(any(f" {basic(a)} " in heard for a in anchor.accepted) for anchor in m.prompt.anchors)
    return {"anchor_hit_rate": hits / len(m.prompt.anchors)}


def _content_gate(m: Measurement, key: str, spec: BaseModel) -> Values:
    return {"content_gate_pass": 1.0 if gate(m).passed else 0.0}


def _speaker(m: Measurement, key: str, spec: BaseModel) -> Values:
    from voxledger.tasks.metrics.speaker import cosine

    ref = m.models.plan.speaker_references[f"{m.prompt.id}:{m.generation.seed}"]
    return {"speaker_sim": cosine(m.models.speaker.embed(m.wav), m.models.reference_embedding(ref))}


def _mos(m: Measurement, key: str, spec: BaseModel) -> Values:
    from voxledger.tasks.metrics.mos import predict_mos

    mos = predict_mos(m.wav, spec)  # type: ignore[arg-type]
    return {"predicted_mos_ovrl": mos.predicted_ovrl, "predicted_mos_sig": mos.predicted_sig, "predicted_mos_bak": mos.predicted_bak}


def _rtf(m: Measurement, key: str, spec: BaseModel) -> Values:
    return {} if m.generation.rtf is None else {"rtf": m.generation.rtf}


def _asr_dep(suite: MetricSuite) -> dict[str, BaseModel]:
    return {"asr": suite.asr}


def _optional(name: str, spec: BaseModel | None) -> dict[str, BaseModel]:
    return {} if spec is None else {name: spec}


def register_builtins() -> None:
    """Register the shipped extractors (idempotent)."""
    from voxledger.tasks.metrics.registry import EXTRACTORS

    if "validity" in EXTRACTORS:
        return
    register(
        ExtractorDef(
            "validity",
            lambda s: {"validity": s.validity},
            (
                MetricDef("duration_s", "duration (s)", "neither"),
                MetricDef("silence_fraction", "silence fraction", "lower"),
                MetricDef("clipping_fraction", "clipping fraction", "lower"),
                MetricDef("expected_duration_ratio", "duration / expected", "neither"),
            ),
            _validity,
        )
    )
    register(
        ExtractorDef(
            "text",
            lambda s: {f"text:{t.normaliser}": t for t in s.text},
            (
                MetricDef("wer:", "WER", "lower", shown=True),
                MetricDef("cer:", "CER", "lower", shown=True),
                MetricDef("word_errors:", "word errors", "lower", count=True),
                MetricDef("ref_words:", "reference words", "neither", count=True),
            ),
            _text,
            depends=_asr_dep,
        )
    )
    register(ExtractorDef("anchors", lambda s: {"asr": s.asr}, (MetricDef("anchor_hit_rate", "anchor hit rate", "higher"),), _anchors))
    register(
        ExtractorDef(
            "content_gate",
            lambda s: {"content_gate": s.content_gate},
            (MetricDef("content_gate_pass", "content gate pass", "higher", shown=True),),
            _content_gate,
            depends=_asr_dep,
        )
    )
    register(
        ExtractorDef(
            "speaker",
            lambda s: _optional("speaker", s.speaker),
            (MetricDef("speaker_sim", "speaker similarity", "higher", shown=True),),
            _speaker,
            gated=True,
        )
    )
    register(
        ExtractorDef(
            "mos",
            lambda s: _optional("mos", s.mos),
            (
                MetricDef("predicted_mos_ovrl", "predicted MOS (OVRL)", "higher", shown=True),
                MetricDef("predicted_mos_sig", "predicted MOS (SIG)", "higher"),
                MetricDef("predicted_mos_bak", "predicted MOS (BAK)", "higher"),
            ),
            _mos,
            gated=True,
        )
    )
    register(ExtractorDef("rtf", lambda s: {"validity": s.validity}, (MetricDef("rtf", "real-time factor", "lower", shown=True),), _rtf))


register_builtins()
