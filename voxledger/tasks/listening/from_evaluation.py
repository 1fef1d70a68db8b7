"""Hand an evaluation's audio to the listening stage: one stimulus per (prompt, candidate).

Merged-weight runtimes are numerically equivalent to their adapter (checked by the equivalence
stage), so listeners would hear the same voice twice: they are left out, and the ``recordings``
candidate becomes the hidden reference. The first seed of the plan is used.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from voxledger.schemas.errors import PacketError
from voxledger.schemas.evaluation import EvaluationPlan
from voxledger.schemas.listening import ListeningProtocol, Stimulus, StimulusSet
from voxledger.stores.home import Home
from voxledger.stores.trees import build_manifest
from voxledger.tasks.listening.export import export_packets

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


def export_packets_for_evaluation(
    home: Home, evaluation_rid: str, protocol: ListeningProtocol, protocol_name: str, out_dir: Path, flow: str = "packets"
) -> dict[str, Any]:
    """Export per-rater packets for an evaluation; returns the packet-set summary."""
    stimuli = stimuli_from_evaluation(home, evaluation_rid)
    if out_dir.exists() and any(out_dir.iterdir()):
        # a re-run: export beside it and accept only if the folder already holds exactly these packets
        scratch = out_dir.with_name(f".{out_dir.name}.check-{os.getpid()}")
        try:
            out = export_packets(home, protocol, stimuli, scratch, protocol_name=protocol_name, flow=flow)
            same = build_manifest(scratch) == build_manifest(out_dir)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if not same:
            raise PacketError(f"{out_dir} already holds other packets; choose a new folder (nothing is overwritten)")
        return {"receipt_id": out.receipt_id, "cached": out.cached, "packets": sorted(str(p) for p in out_dir.iterdir())}
    out = export_packets(home, protocol, stimuli, out_dir, protocol_name=protocol_name, flow=flow)
    return {"receipt_id": out.receipt_id, "cached": out.cached, "packets": [str(p) for p in out.packet_dirs]}
