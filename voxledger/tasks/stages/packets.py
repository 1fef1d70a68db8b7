"""Export blinded per-rater packets and record the ``packet_set`` receipt (plain function).

``OUT/<rater>/`` holds ``index.html`` (the whole page), ``packet.json`` (its canonical manifest;
sha256 of these bytes = the packet digest) and ``audio/<pseudonym>.wav``. ``OUT/trials.csv``
lists every scored trial for external tools, without candidate names; ``OUT/completion-codes.csv``
each rater's completion code when the protocol gives them. The blinding key goes to
``<home>/sealed/``; the receipt carries only its commitment.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import BlobMissingError, PacketError
from voxledger.schemas.listening import (
    BlindingKey,
    ListeningProtocol,
    StimulusSet,
)
from voxledger.schemas.listening_receipts import PacketSetParameters, PacketSetReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, build_manifest, materialize_tree
from voxledger.tasks.listening.design import DesignPlan, plan_packets
from voxledger.tasks.listening.from_evaluation import stimuli_from_evaluation
from voxledger.tasks.listening.instructions import personalise_attention
from voxledger.tasks.listening.keys import home_secret, seal_key
from voxledger.tasks.listening.leakcheck import check_leaks
from voxledger.tasks.listening.render import AudioRenderer
from voxledger.tasks.listening.writer import COMPLETION_CODES, PacketWriter
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import PacketSetOutcome, reuse
from voxledger.tasks.stages.contract import never_stops

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.contract import StageContext
    from voxledger.tasks.stages.reproduce import Preparation


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise PacketError(f"output folder {out_dir} exists and is not empty; choose a new folder (nothing is overwritten)")


def _check_blobs(home: Home, stimuli: StimulusSet) -> None:
    missing = [f"{s.prompt_id}/{s.candidate} ({s.audio_sha256})" for s in stimuli.stimuli if not home.blobs.has(s.audio_sha256)]
    if missing:
        raise BlobMissingError(f"{len(missing)} stimulus audio blob(s) are not in the store: {', '.join(missing[:5])}; put them first")


def export_packets(
    home: Home, protocol: ListeningProtocol, stimuli: StimulusSet, out_dir: Path, *, protocol_name: str, flow: str = "cli"
) -> PacketSetOutcome:
    """Build, write and record one packet per rater under ``out_dir`` (which must be new or empty).

    A second call with the same stimuli, protocol and code reuses the receipt and writes the
    stored packets out again, byte for byte. Raises PacketError, BlobMissingError, PlanError.
    """
    started = utc_now()
    _check_out_dir(out_dir)
    plan_rid, protocol_sha = register_plan(home, protocol, source_name=protocol_name, flow=flow)
    stimuli_sha = home.blobs.put_bytes(canonical_bytes(stimuli))
    _check_blobs(home, stimuli)
    key = cache_key("packet_set", {"stimuli": stimuli_sha}, protocol_sha, {"evaluation_plan_sha256": stimuli.evaluation_plan_sha256})
    hit = reuse(home, key, PacketSetReceipt)
    if hit is not None:
        return PacketSetOutcome(hit.receipt_id, hit.receipt, True, _materialize(home, hit.receipt, out_dir), verified=hit.verified)
    design = plan_packets(protocol, stimuli)
    set_id = secrets.token_hex(16)
    check = protocol.check_criterion()
    spoken = personalise_attention(design, home_secret(home), set_id, check.scale) if check else {}
    by_key = {(s.prompt_id, s.candidate): s for s in stimuli.stimuli}
    every = [t for plans in (*design.trials.values(), *design.familiarisation.values()) for t in plans]
    sources = {s.source for t in every for s in (*t.slots, *([t.reference] if t.reference else []))}
    renderer = AudioRenderer(home, protocol, by_key, sources, spoken)
    writer = PacketWriter(home, protocol, protocol_sha, renderer, out_dir, set_id)
    for rater, plans in design.trials.items():
        writer.write(rater, plans, design.familiarisation.get(rater, []))
    leaks = check_leaks(writer.files, protocol.sample_rate_hz, protocol.blinding)
    if leaks.leaks and protocol.blinding.on_leak == "fail":
        raise PacketError(
            f"blinding leak: {'; '.join(leaks.leaks)}. Nothing was recorded; delete {out_dir}, "
            "fix the stimuli or the blinding settings, or set blinding.on_leak: warn to record it instead"
        )
    commitment = seal_key(
        home,
        BlindingKey(
            packet_set_id=writer.set_id,
            nonce=secrets.token_hex(32),
            protocol_sha256=protocol_sha,
            evaluation_plan_sha256=stimuli.evaluation_plan_sha256,
            entries=tuple(writer.entries),
        ),
    )
    csv_sha = home.blobs.put_bytes(writer.csv_bytes())
    (out_dir / "trials.csv").write_bytes(home.blobs.get_bytes(csv_sha))
    packet_subjects = [artifact(home.blobs, f"packet:{p.rater_id}", p.tree_sha256, TREE_MEDIA_TYPE) for p in writer.packets]
    csv_subject = artifact(home.blobs, "trials_csv", csv_sha, "text/csv")
    codes_subjects = []
    if protocol.completion.code != "none":
        codes_sha = home.blobs.put_bytes(writer.codes_bytes())
        (out_dir / COMPLETION_CODES).write_bytes(home.blobs.get_bytes(codes_sha))
        codes_subjects.append(artifact(home.blobs, "completion_codes", codes_sha, "text/csv"))
    attention_subjects = [
        artifact(home.blobs, "attention_audio", r.source_sha256, "audio/wav")
        for src, r in sorted(renderer.sources.items())
        if src.startswith("attention:")
    ]
    audio_inputs = [InputRef(role="stimulus_audio", sha256=d, ref="artifact") for d in sorted({s.audio_sha256 for s in stimuli.stimuli})]
    parameters = _parameters(writer, design, renderer, protocol_sha, stimuli, stimuli_sha, commitment)
    receipt = build_receipt(
        PacketSetReceipt,
        flow=flow,
        task="export_packets",
        started_at=started,
        key=key,
        subjects=[*packet_subjects, csv_subject, *codes_subjects, *attention_subjects],
        inputs=[
            InputRef(role="protocol", sha256=plan_rid, ref="receipt"),
            InputRef(role="stimuli", sha256=stimuli_sha, ref="artifact"),
            *audio_inputs,
        ],
        parameters=parameters.model_copy(update={"leak_check": leaks}),
    )
    return PacketSetOutcome(home.record(receipt), receipt, False, writer.dirs)


def _parameters(
    writer: PacketWriter,
    design: DesignPlan,
    renderer: AudioRenderer,
    protocol_sha: str,
    stimuli: StimulusSet,
    stimuli_sha: str,
    commitment: str,
) -> PacketSetParameters:
    return PacketSetParameters(
        packet_set_id=writer.set_id,
        protocol_sha256=protocol_sha,
        evaluation_plan_sha256=stimuli.evaluation_plan_sha256,
        stimuli_sha256=stimuli_sha,
        key_commitment_sha256=commitment,
        candidates=tuple(sorted({s.candidate for s in stimuli.stimuli})),
        packets=tuple(writer.packets),
        balance=design.audit,
        loudness=renderer.report,
        skipped=design.skipped,
        familiarisation_trials=max((len(v) for v in design.familiarisation.values()), default=0),
        headphone_check=writer.protocol.headphone_check.method,
        completion_code=writer.protocol.completion.code,
    )


def _materialize(home: Home, receipt: PacketSetReceipt, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    dirs = {}
    for p in receipt.parameters.packets:
        dirs[p.rater_id] = out_dir / p.rater_id
        materialize_tree(home.blobs, p.tree_sha256, dirs[p.rater_id])
    home.blobs.export(receipt.subject("trials_csv").sha256, out_dir / "trials.csv")
    if receipt.parameters.completion_code != "none":
        home.blobs.export(receipt.subject("completion_codes").sha256, out_dir / COMPLETION_CODES)
    return dirs


def export_packets_for_evaluation(
    home: Home, evaluation_rid: str, protocol: ListeningProtocol, protocol_name: str, out_dir: Path, flow: str = "packets"
) -> dict[str, Any]:
    """Export per-rater packets for an evaluation; returns the packet-set summary (``verified``: what a
    cache hit checked, a ``ReuseCheck``, or None)."""
    stimuli = stimuli_from_evaluation(home, evaluation_rid, protocol.sample_rate_hz)
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
        return {
            "receipt_id": out.receipt_id,
            "cached": out.cached,
            "packets": sorted(str(p) for p in out_dir.iterdir()),
            "verified": out.verified,
        }
    out = export_packets(home, protocol, stimuli, out_dir, protocol_name=protocol_name, flow=flow)
    return {"receipt_id": out.receipt_id, "cached": out.cached, "packets": [str(p) for p in out.packet_dirs], "verified": out.verified}


# The stage contract (tasks/stages/contract.py). Packet sets are not re-run (the row says why).
run = export_packets_for_evaluation
verdict = never_stops


def inputs(ctx: StageContext) -> dict[str, Any] | None:
    """Inputs: the evaluation receipt and the packets folder; runs only when the pipeline is given `--packets`."""
    if not ctx.packets_dir:
        return None
    return {"out_dir": ctx.packets_dir, "evaluation_rid": ctx.rid("evaluate")}


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """Refused: a packet set is blinded with a fresh secret key and set id by design, so no re-run can equal it."""
    from voxledger.schemas.errors import ReproductionError
    from voxledger.schemas.stages import stage_row

    row = stage_row(prep.stage)
    raise ReproductionError(f"receipt {prep.rid[:12]} ({prep.stage}) is not re-run: {row.not_rerun if row else 'no stage row'}")


def compare(h: Home, s: Home, original: PacketSetReceipt, rerun: PacketSetReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """Every stored output byte for byte (what a packet set would be judged by, were it deterministic)."""
    from voxledger.tasks.reproduction import compare as cmp

    return cmp.compare_outputs(original, rerun)


def summary(receipt: PacketSetReceipt) -> str:
    """The blinding-leak check of a packet set: verdict, worst gated AUC, hidden-reference correlation."""
    lc = getattr(receipt.parameters, "leak_check", None)
    if lc is None:
        return "no leak check recorded"
    gated = [w for w in lc.worst if w.gated]
    worst = max(gated, key=lambda w: w.auc, default=None)
    shown = f"max gated AUC {worst.auc:.3f} ({worst.feature}, {worst.a} vs {worst.b})" if worst else "no gated feature"
    stated = f"; not removable, stated: {', '.join(s.split()[0] for s in lc.unremoved)}" if lc.unremoved else ""
    return (
        f"leak check {'passed' if lc.passed else 'FAILED'}: {shown}, threshold {lc.auc_max}; "
        f"hidden-reference correlation max {lc.hidden_reference_correlation_max}{stated}"
    )
