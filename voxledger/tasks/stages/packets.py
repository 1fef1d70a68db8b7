"""Export blinded per-rater packets and record the ``packet_set`` receipt (plain function).

``OUT/<rater>/`` holds ``index.html`` (the whole page), ``packet.json`` (its canonical manifest;
sha256 of these bytes = the packet digest) and ``audio/<pseudonym>.wav``. ``OUT/trials.csv``
lists every scored trial for external tools, without candidate names; ``OUT/completion-codes.csv``
each rater's completion code when the protocol gives them. The blinding key goes to
``<home>/sealed/``; the receipt carries only its commitment.
"""

from __future__ import annotations

import csv
import io
import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes, sha256_hex
from voxledger.schemas.errors import BlobMissingError, PacketError
from voxledger.schemas.listening import (
    BlindingKey,
    KeyEntry,
    ListeningProtocol,
    PacketAudio,
    PacketCompletion,
    PacketCriterion,
    PacketHeadphoneCheck,
    PacketHeadphoneTrial,
    PacketManifest,
    PacketTrial,
    StimulusSet,
)
from voxledger.schemas.listening_receipts import PacketRef, PacketSetParameters, PacketSetReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, build_manifest, materialize_tree, put_tree
from voxledger.tasks.listening.audio import encode_int16
from voxledger.tasks.listening.design import DesignPlan, Slot, TrialPlan, plan_packets
from voxledger.tasks.listening.from_evaluation import stimuli_from_evaluation
from voxledger.tasks.listening.headphones import encode_stereo, huggins_trial
from voxledger.tasks.listening.instructions import personalise_attention
from voxledger.tasks.listening.keys import home_secret, keyed_hex, pseudonym, rater_token, seal_key
from voxledger.tasks.listening.leakcheck import PacketFile, check_leaks
from voxledger.tasks.listening.page import render_page
from voxledger.tasks.listening.render import AudioRenderer
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import PacketSetOutcome, reuse
from voxledger.tasks.stages.contract import never_stops

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.contract import StageContext
    from voxledger.tasks.stages.reproduce import Preparation

COMPLETION_CODES = "completion-codes.csv"
CSV_COLUMNS = ("rater_id", "packet_sha256", "trial", "position", "task", "criteria", "slot", "stimulus", "file", "reference_file")


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
    writer = _PacketWriter(home, protocol, protocol_sha, renderer, out_dir, set_id)
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
    writer: _PacketWriter,
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


class _PacketWriter:
    """Writes packets one rater at a time, collecting key entries, CSV rows and packet refs."""

    def __init__(
        self, home: Home, protocol: ListeningProtocol, protocol_sha: str, renderer: AudioRenderer, out_dir: Path, set_id: str
    ) -> None:
        self.home, self.protocol, self.protocol_sha, self.renderer, self.out_dir = home, protocol, protocol_sha, renderer, out_dir
        self.secret = home_secret(home)
        self.set_id = set_id
        self.entries: list[KeyEntry] = []
        self.rows: list[tuple[str, ...]] = []
        self.packets: list[PacketRef] = []
        self.dirs: dict[str, Path] = {}
        self.files: list[PacketFile] = []  # every rendered file, for the leak check

    def _name(self, rater: str, slot_key: str) -> str:
        return pseudonym(self.secret, self.set_id, rater, slot_key, self.protocol.blinding.pseudonym_hex_chars)

    def write(self, rater: str, plans: list[TrialPlan], practice: list[TrialPlan]) -> None:
        """One rater's folder: scored ``plans`` (``t001``...), unscored ``practice`` (``f01``...), headphone screen, page."""
        folder = self.out_dir / rater
        (folder / "audio").mkdir(parents=True)
        audio: list[PacketAudio] = []
        entries: list[KeyEntry] = []
        trials = [self._trial(folder, rater, f"t{n:03d}", plan, audio, entries) for n, plan in enumerate(plans, 1)]
        familiarisation = [self._trial(folder, rater, f"f{n:02d}", plan, audio, entries) for n, plan in enumerate(practice, 1)]
        headphones = self._headphones(folder, rater, audio)
        if len({a.id for a in audio}) != len(audio):
            raise PacketError(f"pseudonym collision in packet {rater}; raise blinding.pseudonym_hex_chars")
        manifest = PacketManifest(
            packet_set_id=self.set_id,
            rater_id=rater,
            protocol_sha256=self.protocol_sha,
            title=self.protocol.title,
            instructions=self.protocol.instructions,
            trials=tuple(trials),
            criteria=tuple(PacketCriterion(name=c.name, task=c.task, question=c.question, scale=c.scale) for c in self.protocol.criteria),
            audio=tuple(sorted(audio, key=lambda a: a.id)),
            familiarisation=tuple(familiarisation),
            headphone_check=headphones,
            completion=self._completion(rater),
        )
        body = canonical_bytes(manifest)
        packet_sha = sha256_hex(body)
        (folder / "packet.json").write_bytes(body)
        (folder / "index.html").write_text(render_page(manifest, packet_sha, rater_token(self.secret, packet_sha)), encoding="utf-8")
        tree_sha, _ = put_tree(self.home.blobs, folder, cache=self.home.stat_cache)
        self.packets.append(PacketRef(rater_id=rater, packet_sha256=packet_sha, tree_sha256=tree_sha, trials=len(trials)))
        self.entries += entries
        self.dirs[rater] = folder
        files = {a.id: a.file for a in audio}
        for pos, t in enumerate(trials, 1):
            for i, stim in enumerate(t.stimuli):
                ref = files[t.reference] if t.reference else ""
                self.rows.append((rater, packet_sha, t.id, str(pos), t.task, ";".join(t.criteria), str(i), stim, files[stim], ref))

    def _trial(self, folder: Path, rater: str, tid: str, plan: TrialPlan, audio: list[PacketAudio], entries: list[KeyEntry]) -> PacketTrial:
        """Render one trial's files (each slot its own pseudonym and copy) and return it as the page shows it."""
        labelled = [(str(i), s) for i, s in enumerate(plan.slots)] + ([("ref", plan.reference)] if plan.reference else [])
        names = {}
        for slot_key, slot in labelled:
            name = self._name(rater, f"{tid}/{slot_key}")
            pcm = self.renderer.samples(slot.source, f"{self.set_id}|{name}", hidden_reference=slot.role == "hidden_reference")
            data = encode_int16(pcm, self.renderer.rate)
            self.files.append(PacketFile(rater, name, tid, plan.task, slot.role, slot.candidate, slot.prompt_id, pcm, slot.source))
            (folder / "audio" / f"{name}.wav").write_bytes(data)
            audio.append(PacketAudio(id=name, file=f"audio/{name}.wav", sha256=sha256_hex(data)))
            entries.append(self._entry(name, rater, tid, slot, sha256_hex(data)))
            names[slot_key] = name
        stimuli = tuple(names[str(i)] for i in range(len(plan.slots)))
        return PacketTrial(id=tid, task=plan.task, criteria=plan.criteria, stimuli=stimuli, reference=names.get("ref"))

    def _headphones(self, folder: Path, rater: str, audio: list[PacketAudio]) -> PacketHeadphoneCheck | None:
        """The rater's Huggins-pitch trials (own noise, answers drawn from the home's secret), or None when the protocol has none."""
        check = self.protocol.headphone_check
        if check.method == "none":
            return None
        out = []
        for n in range(1, check.trials + 1):
            name = self._name(rater, f"h{n:02d}")
            answer = 1 + int(keyed_hex(self.secret, "headphones", self.set_id, rater, str(n))[:8], 16) % 3
            seed = int(keyed_hex(self.secret, "headphones-noise", self.set_id, rater, str(n))[:8], 16)
            data = encode_stereo(huggins_trial(check, self.renderer.rate, seed, answer), self.renderer.rate)
            (folder / "audio" / f"{name}.wav").write_bytes(data)
            audio.append(PacketAudio(id=name, file=f"audio/{name}.wav", sha256=sha256_hex(data)))
            out.append(PacketHeadphoneTrial(audio=name, answer=answer))
        return PacketHeadphoneCheck(method=check.method, trials=tuple(out), pass_min=check.pass_min, attempts=check.attempts)

    def completion_code(self, rater: str) -> str | None:
        """The rater's completion code under ``protocol.completion`` (None when there is none)."""
        c = self.protocol.completion
        if c.code == "fixed":
            return c.fixed_code
        return keyed_hex(self.secret, "completion", self.set_id, rater)[:10].upper() if c.code == "per_rater" else None

    def _completion(self, rater: str) -> PacketCompletion | None:
        c, code = self.protocol.completion, self.completion_code(rater)
        if code is None and c.redirect_url is None:
            return None
        url = c.redirect_url.replace("{code}", code or "") if c.redirect_url else None
        return PacketCompletion(code=code, redirect_url=url)

    def _entry(self, name: str, rater: str, tid: str, slot: Slot, rendered_sha: str) -> KeyEntry:
        source_sha = self.renderer.sources[slot.source].source_sha256
        return KeyEntry(
            pseudonym=name,
            rater_id=rater,
            trial_id=tid,
            role=slot.role,
            candidate=slot.candidate,
            prompt_id=slot.prompt_id,
            category=slot.category,
            audio_sha256=source_sha,
            rendered_sha256=rendered_sha,
            expected=slot.expected,
        )

    def codes_bytes(self) -> bytes:
        """``rater_id,completion_code`` per packet, for the organiser to check what raters paste into the platform."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(("rater_id", "completion_code"))
        w.writerows((p.rater_id, self.completion_code(p.rater_id) or "") for p in self.packets)
        return buf.getvalue().encode("utf-8")

    def csv_bytes(self) -> bytes:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        w.writerows(self.rows)
        return buf.getvalue().encode("utf-8")


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
