"""Hand an evaluation's audio to the listening stage: one stimulus per (prompt, candidate).

Merged-weight runtimes are numerically equivalent to their adapter (checked by the equivalence
stage), so listeners would hear the same voice twice: they are left out, and the ``recordings``
candidate becomes the hidden reference. The first seed of the plan is used.
"""

from __future__ import annotations

import json

from voxledger.schemas.errors import PacketError
from voxledger.schemas.evaluation import EvaluationPlan
from voxledger.schemas.listening import Stimulus, StimulusSet
from voxledger.stores.home import Home

SKIPPED_RUNTIMES = ("merged", "merged_export")


def stimuli_from_evaluation(home: Home, evaluation_rid: str) -> StimulusSet:
    """Valid generations of the evaluation's first seed, one per prompt and listened-to candidate."""
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
            audio_sha256=g["audio_sha256"],
        )
        for g in gens
        if g["valid"] and g["seed"] == seed and runtimes[g["candidate"]] not in SKIPPED_RUNTIMES
    ]
    if not stimuli:
        raise PacketError(f"evaluation {evaluation_rid} has no valid audio for seed {seed}: nothing to listen to")
    return StimulusSet(evaluation_plan_sha256=doc["parameters"]["plan_sha256"], stimuli=tuple(stimuli))
