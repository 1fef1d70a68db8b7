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
from voxledger.tasks.metrics.builtin import gate
from voxledger.tasks.metrics.registry import EXTRACTORS, ExtractorDef, Measurement


def _registered(plan: EvaluationPlan) -> list[tuple[ExtractorDef, str, Any]]:
    """(extractor, key, spec) for every registered extractor the plan's suite switches on, in order."""
    return [(e, key, spec) for e in EXTRACTORS.values() for key, spec in e.specs(plan.metrics).items()]


def extractor_specs(plan: EvaluationPlan) -> dict[str, dict[str, Any]]:
    """Each extractor's spec as JSON (so the catalog can answer "which evaluations used X")."""
    return {key: spec.model_dump(mode="json") for _, key, spec in _registered(plan)}


def extractor_ids(plan: EvaluationPlan) -> dict[str, str]:
    """Identity of each extractor: sha256 of its spec, the specs it depends on, and the code digest."""
    code = code_identity().source_sha256
    return {key: canonical_digest({"spec": spec, **e.depends(plan.metrics), "code": code}) for e, key, spec in _registered(plan)}


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
        """Every registered extractor's metrics for one generation; gated ones only past the content gate."""
        m = Measurement(
            wav=wav, sample_rate_hz=16000, text=prompt.text, prompt=prompt, generation=gen, suite=self.plan.metrics, models=self
        )
        out: list[Observation] = []
        for e, key, spec in _registered(self.plan):
            if e.gated and not gate(m).passed:
                continue
            for metric, value in e.measure(m, key, spec).items():
                out.append(
                    Observation(
                        candidate=gen.candidate,
                        prompt_id=prompt.id,
                        category=prompt.category,
                        seed=gen.seed,
                        metric=metric,
                        value=float(value),
                        extractor_sha256=self.ids[key],
                    )
                )
        return out


def extract_all(
    home: Home, plan: EvaluationPlan, gens: list[Generation], corpus: Path, journal: Journal, progress: Callable[[str], None] | None = None
) -> list[Observation]:
    """Observations for every valid generation; rows already journaled are not recomputed."""
    prompts = {p.id: p for p in plan.prompts}
    seen: dict[tuple[str, str, int], list[Observation]] = {}
    measured: dict[tuple[str, str, int], str | None] = {}
    for row in journal.rows():
        key = (row["candidate"], row["prompt_id"], row["seed"])
        seen[key] = [Observation.model_validate(o) for o in row["observations"]]
        measured[key] = row.get("audio_sha256")
    ex = Extractors(plan, corpus)
    for i, g in enumerate(gens, 1):
        key = (g.candidate, g.prompt_id, g.seed)
        if not g.valid or (key in seen and measured[key] in (None, g.audio_sha256)):
            continue  # measured before, on these very bytes
        wav, _ = sf.read(io.BytesIO(home.blobs.get_bytes(g.audio_sha256 or "")), dtype="float32")
        obs = ex.observe(g, prompts[g.prompt_id], wav)
        journal.append(
            {
                "candidate": g.candidate,
                "prompt_id": g.prompt_id,
                "seed": g.seed,
                "audio_sha256": g.audio_sha256,
                "observations": [o.model_dump(mode="json") for o in obs],
            }
        )
        seen[key] = obs
        if progress:
            progress(f"measuring {i}/{len(gens)}: {g.candidate} {g.prompt_id} seed {g.seed}")
    return [o for g in gens if (g.candidate, g.prompt_id, g.seed) in seen for o in seen[(g.candidate, g.prompt_id, g.seed)]]
