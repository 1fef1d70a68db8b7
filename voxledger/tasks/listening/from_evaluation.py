"""Hand an evaluation's audio to the listening stage: one stimulus per (prompt, candidate).

Merged-weight runtimes are numerically equivalent to their adapter (checked by the equivalence
stage), so listeners would hear the same voice twice: they are left out, and the ``recordings``
candidate becomes the hidden reference. The first seed of the plan is used.

Audio is taken at the listening protocol's rate: the 16 kHz clip the metrics used, or the clip at
the rate the backend (or the recording) produced, resampled to the protocol's rate when it differs
(a 24 kHz protocol hears cosyvoice3 at 24 kHz; a clip kept only at 16 kHz is upsampled and so keeps
its 8 kHz bandwidth). Resampled clips are stored by digest like every other stimulus.
"""

from __future__ import annotations

import io
import json
from typing import Any

import soundfile as sf

from voxledger.schemas.errors import PacketError
from voxledger.schemas.evaluation import EvaluationPlan
from voxledger.schemas.listening import Stimulus, StimulusSet
from voxledger.stores.home import Home

SKIPPED_RUNTIMES = ("merged", "merged_export")


def _at_rate(home: Home, g: dict[str, Any], rate: int) -> str:
    """The digest of generation ``g``'s clip at ``rate`` (stored when it has to be resampled)."""
    from voxledger.tasks.evaluation.generate import SAMPLE_RATE_HZ, resample_to, wav_bytes

    native, native_rate = g.get("native_audio_sha256"), g.get("native_sample_rate_hz")
    if native and native_rate == rate:
        return str(native)
    if rate == SAMPLE_RATE_HZ or not (native or g["audio_sha256"]):
        return str(g["audio_sha256"])
    source = str(native or g["audio_sha256"])
    wav, sr = sf.read(io.BytesIO(home.blobs.get_bytes(source)), dtype="float32")
    return home.blobs.put_bytes(wav_bytes(resample_to(wav, sr, rate), rate))


def stimuli_from_evaluation(home: Home, evaluation_rid: str, sample_rate_hz: int = 16000) -> StimulusSet:
    """Valid generations of the evaluation's first seed, one per prompt and listened-to candidate, at ``sample_rate_hz``."""
    doc = home.receipts.read_document(evaluation_rid)
    plan = EvaluationPlan.model_validate(json.loads(home.blobs.get_bytes(doc["parameters"]["plan_sha256"])))
    gens = json.loads(home.blobs.get_bytes(next(a["sha256"] for a in doc["subjects"] if a["role"] == "generations")))
    runtimes = {c.name: c.runtime for c in plan.candidates}
    prompts = {p.id: p for p in plan.prompts}
    seed = plan.seeds[0]
    stimuli = [
        Stimulus(
            prompt_id=g["prompt_id"],
            category=prompts[g["prompt_id"]].category,
            text=prompts[g["prompt_id"]].text,
            candidate=g["candidate"],
            seed=seed,
            audio_sha256=_at_rate(home, g, sample_rate_hz),
        )
        for g in gens
        if g["valid"] and g["seed"] == seed and runtimes[g["candidate"]] not in SKIPPED_RUNTIMES
    ]
    if not stimuli:
        raise PacketError(f"evaluation {evaluation_rid} has no valid audio for seed {seed}: nothing to listen to")
    return StimulusSet(evaluation_plan_sha256=doc["parameters"]["plan_sha256"], stimuli=tuple(stimuli))
