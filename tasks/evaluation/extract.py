"""Extractors: ASR (WER/CER per normaliser, anchors), content gate, validity, speaker, MOS.

The content gate runs first: rows failing it get no secondary quality metrics (speaker
similarity, predicted MOS) but still count in validity. Every observation carries the digest of
the extractor that produced it (its spec and the code), so comparisons can refuse mixed sources.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from voxledger.schemas.canonical import canonical_digest
from voxledger.schemas.evaluation import EvaluationPlan, Generation, Observation, Prompt
from voxledger.stores.home import Home
from voxledger.stores.identity import code_identity
from voxledger.tasks.evaluation.generate import to_16k
from voxledger.tasks.evaluation.journal import Journal
from voxledger.tasks.metrics.normalise import basic


def extractor_specs(plan: EvaluationPlan) -> dict[str, dict[str, Any]]:
    """Each extractor's spec as JSON (so the catalog can answer "which evaluations used X")."""
    m = plan.metrics
    specs: dict[str, Any] = {"asr": m.asr, "validity": m.validity, "content_gate": m.content_gate}
    specs |= {f"text:{t.normaliser}": t for t in m.text}
    if m.speaker is not None:
        specs["speaker"] = m.speaker
    if m.mos is not None:
        specs["mos"] = m.mos
    return {k: v.model_dump(mode="json") for k, v in specs.items()}


def extractor_ids(plan: EvaluationPlan) -> dict[str, str]:
    """Identity of each extractor: sha256 of its spec plus the code digest."""
    m = plan.metrics
    code = code_identity().source_sha256
    ids = {"asr": canonical_digest({"spec": m.asr, "code": code}),
           "validity": canonical_digest({"spec": m.validity, "code": code}),
           "content_gate": canonical_digest({"spec": m.content_gate, "asr": m.asr, "code": code})}  # fmt: skip
    for t in m.text:
        ids[f"text:{t.normaliser}"] = canonical_digest({"spec": t, "asr": m.asr, "code": code})
    if m.speaker is not None:
        ids["speaker"] = canonical_digest({"spec": m.speaker, "code": code})
    if m.mos is not None:
        ids["mos"] = canonical_digest({"spec": m.mos, "code": code})
    return ids


class Extractors:
    """Loads each model once, on first use."""

    def __init__(self, plan: EvaluationPlan, corpus: Path) -> None:
        self.plan = plan
        self.corpus = corpus
        self.ids = extractor_ids(plan)
        self._refs: dict[str, np.ndarray] = {}

    @cached_property
    def asr(self) -> Any:
        from voxledger.tasks.metrics.asr import load_asr_model

        return load_asr_model(self.plan.metrics.asr)

    @cached_property
    def speaker(self) -> Any:
        from voxledger.tasks.metrics.speaker import load_speaker_encoder

        return load_speaker_encoder(self.plan.metrics.speaker)

    def reference_embedding(self, rel: str) -> np.ndarray:
        if rel not in self._refs:
            wav, sr = sf.read(str(self.corpus / rel), dtype="float32")
            self._refs[rel] = self.speaker.embed(to_16k(wav, sr))
        return self._refs[rel]

    def observe(self, gen: Generation, prompt: Prompt, wav: np.ndarray) -> list[Observation]:
        from voxledger.tasks.metrics.content_gate import content_gate
        from voxledger.tasks.metrics.textmetrics import score_text
        from voxledger.tasks.metrics.validity import audio_stats

        m = self.plan.metrics
        out: list[Observation] = []

        def add(metric: str, value: float, extractor: str) -> None:
            out.append(Observation(candidate=gen.candidate, prompt_id=prompt.id, category=prompt.category, seed=gen.seed,
                                   metric=metric, value=float(value), extractor_sha256=self.ids[extractor]))  # fmt: skip

        stats = audio_stats(wav, 16000, m.validity, text=prompt.text)
        add("duration_s", stats.duration_s, "validity")
        add("silence_fraction", stats.silence_fraction, "validity")
        add("clipping_fraction", stats.clipping_fraction, "validity")
        if stats.expected_duration_ratio is not None:
            add("expected_duration_ratio", stats.expected_duration_ratio, "validity")
        hyp = self.asr.transcribe(wav)
        for t in m.text:
            score = score_text(prompt.text, hyp, t)
            add(f"wer:{t.normaliser}", score.wer, f"text:{t.normaliser}")
            add(f"cer:{t.normaliser}", score.cer, f"text:{t.normaliser}")
            add(f"word_errors:{t.normaliser}", score.substitutions + score.deletions + score.insertions, f"text:{t.normaliser}")
            add(f"ref_words:{t.normaliser}", score.hits + score.substitutions + score.deletions, f"text:{t.normaliser}")
        if prompt.anchors:
            heard = f" {basic(hyp)} "
            hits = sum(any(f" {basic(a)} " in heard for a in anchor.accepted) for anchor in prompt.anchors)
            add("anchor_hit_rate", hits / len(prompt.anchors), "asr")
        gate = content_gate(prompt.text, hyp, prompt.instruction, m.content_gate)
        add("content_gate_pass", 1.0 if gate.passed else 0.0, "content_gate")
        if gate.passed:
            if m.speaker is not None:
                ref = self.plan.speaker_references[f"{prompt.id}:{gen.seed}"]
                from voxledger.tasks.metrics.speaker import cosine

                add("speaker_sim", cosine(self.speaker.embed(wav), self.reference_embedding(ref)), "speaker")
            if m.mos is not None:
                from voxledger.tasks.metrics.mos import predict_mos

                mos = predict_mos(wav, m.mos)
                add("predicted_mos_ovrl", mos.predicted_ovrl, "mos")
                add("predicted_mos_sig", mos.predicted_sig, "mos")
                add("predicted_mos_bak", mos.predicted_bak, "mos")
        if gen.rtf is not None:
            add("rtf", gen.rtf, "validity")
        return out


def extract_all(home: Home, plan: EvaluationPlan, gens: list[Generation], corpus: Path, journal: Journal,
                progress: Callable[[str], None] | None = None) -> list[Observation]:  # fmt: skip
    """Observations for every valid generation; rows already journaled are not recomputed."""
    prompts = {p.id: p for p in plan.prompts}
    seen: dict[tuple[str, str, int], list[Observation]] = {}
    measured: dict[tuple[str, str, int], str | None] = {}
    for row in journal.rows():
        key = (row["candidate"], row["prompt_id"], row["seed"])
        seen[key] = [Observation.model_validate(o) for o in row["observations"]]
        measured[key] = row.get("audio_sha256")
    ex = Extractors(plan, corpus)
    for g in gens:
        key = (g.candidate, g.prompt_id, g.seed)
        if not g.valid or (key in seen and measured[key] in (None, g.audio_sha256)):
            continue  # measured before, on these very bytes
        wav, _ = sf.read(io.BytesIO(home.blobs.get_bytes(g.audio_sha256 or "")), dtype="float32")
        obs = ex.observe(g, prompts[g.prompt_id], wav)
        journal.append({"candidate": g.candidate, "prompt_id": g.prompt_id, "seed": g.seed, "audio_sha256": g.audio_sha256,
                        "observations": [o.model_dump(mode="json") for o in obs]})  # fmt: skip
        seen[key] = obs
        if progress:
            progress(f"measured {g.candidate} {g.prompt_id}")
    return [o for g in gens if (g.candidate, g.prompt_id, g.seed) in seen for o in seen[(g.candidate, g.prompt_id, g.seed)]]
