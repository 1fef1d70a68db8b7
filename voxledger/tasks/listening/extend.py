"""``packets extend``: add raters to an exported packet set without touching its packets.

The new raters get a block design of their own over the same prompts (``design.plan_extension``:
every prompt heard by the same number of them), rendered by the same writer at the first
export's loudness, under the same packet-set id, secret and protocol. The result is a new
``packet_set`` receipt listing the parent's packets first (the same trees, so the same bytes)
and the new ones after, with a key holding the parent's entries and the new ones (sealed anew),
the balance audit of old and new together and a leak check over every file. Aggregate the new
receipt with every submission, old and new.
"""

from __future__ import annotations

import io
import secrets
import wave
from collections import Counter
from pathlib import Path

import numpy as np

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.errors import PacketError, ReceiptError
from voxledger.schemas.listening import BlindingKey, KeyEntry, ListeningProtocol, PacketManifest, StimulusSet
from voxledger.schemas.listening_receipts import (
    BalanceAudit,
    PacketExtension,
    PacketSetParameters,
    PacketSetReceipt,
    PositionBalance,
)
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, load_manifest, materialize_tree
from voxledger.tasks.listening.design import plan_extension
from voxledger.tasks.listening.instructions import personalise_attention
from voxledger.tasks.listening.keys import home_secret, open_sealed_key, seal_key
from voxledger.tasks.listening.leakcheck import PacketFile, check_leaks
from voxledger.tasks.listening.render import AudioRenderer
from voxledger.tasks.listening.writer import COMPLETION_CODES, PacketWriter
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import PacketSetOutcome, reuse

MAX_RATERS = 500  # as ``Design.raters``


def read_packet_set(home: Home, receipt_id: str) -> PacketSetReceipt:
    """The packet-set receipt with this id; ReceiptError when it is another kind."""
    doc = home.receipts.read_document(receipt_id)
    if doc.get("kind") != "packet_set":
        raise ReceiptError(f"receipt {receipt_id} is a {doc.get('kind')!r} receipt, not a packet_set; pass the id `packets export` printed")
    return PacketSetReceipt.model_validate(doc)


def extend_packets(home: Home, parent_rid: str, raters: int, out_dir: Path, *, flow: str = "cli") -> PacketSetOutcome:
    """Write ``raters`` more packets under ``out_dir`` (new or empty) and record the extended packet set.

    The same parent and count give the same receipt again (its new packets written out again).
    Raises PacketError (bad count, folder not empty, a blinding leak), ReceiptError (not a packet set).
    """
    started = utc_now()
    parent = read_packet_set(home, parent_rid)
    p = parent.parameters
    if not 1 <= raters <= MAX_RATERS - len(p.packets):
        raise PacketError(
            f"--raters {raters}: give 1 to {MAX_RATERS - len(p.packets)} (the set has {len(p.packets)} of at most {MAX_RATERS})"
        )
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise PacketError(
            f"output folder {out_dir} exists and is not empty; choose a new folder for the added packets (nothing is overwritten)"
        )
    key = cache_key("packet_set", {"parent": parent_rid, "stimuli": p.stimuli_sha256}, p.protocol_sha256, {"extend_raters": raters})
    hit = reuse(home, key, PacketSetReceipt)
    if hit is not None:
        return PacketSetOutcome(hit.receipt_id, hit.receipt, True, _materialize(home, hit.receipt, out_dir), verified=hit.verified)
    protocol = ListeningProtocol.model_validate_json(home.blobs.get_bytes(p.protocol_sha256))
    stimuli = StimulusSet.model_validate_json(home.blobs.get_bytes(p.stimuli_sha256))
    old_key, _ = open_sealed_key(home, p.key_commitment_sha256)
    prompts = sorted({s.prompt_id for s in stimuli.stimuli})
    existing = _incidence(old_key.entries, [r.rater_id for r in p.packets], prompts)
    k = min(raters, max(1, round(p.balance.raters_per_prompt * raters / len(p.packets))))
    width = max(2, len(str(len(p.packets) + raters)))
    new_ids = [f"r{i:0{width}d}" for i in range(len(p.packets) + 1, len(p.packets) + raters + 1)]
    taken = {r.rater_id for r in p.packets} & set(new_ids)
    if taken:
        raise PacketError(
            f"rater ids {sorted(taken)} are taken in packet set {parent_rid[:12]}; this set's raters are not numbered r01... in order"
        )
    number = p.extension.extension + 1 if p.extension else 1
    turns = _turns(home, parent, old_key.entries, stimuli)
    design = plan_extension(protocol, stimuli, existing, new_ids, k, number, turns)
    check = protocol.check_criterion()
    spoken = personalise_attention(design, home_secret(home), p.packet_set_id, check.scale) if check else {}
    every = [t for plans in (*design.trials.values(), *design.familiarisation.values()) for t in plans]
    sources = {s.source for t in every for s in (*t.slots, *([t.reference] if t.reference else []))}
    by_key = {(s.prompt_id, s.candidate): s for s in stimuli.stimuli}
    renderer = AudioRenderer(home, protocol, by_key, sources, spoken, applied_lufs=p.loudness.applied_lufs)
    writer = PacketWriter(home, protocol, p.protocol_sha256, renderer, out_dir, p.packet_set_id)
    for rater, plans in design.trials.items():
        writer.write(rater, plans, design.familiarisation.get(rater, []))
    leaks = check_leaks([*_old_files(home, parent, old_key.entries), *writer.files], protocol.sample_rate_hz, protocol.blinding)
    if leaks.leaks and protocol.blinding.on_leak == "fail":
        raise PacketError(f"blinding leak: {'; '.join(leaks.leaks)}. Nothing was recorded; delete {out_dir}, or set blinding.on_leak: warn")
    blinding = BlindingKey(
        packet_set_id=p.packet_set_id,
        nonce=secrets.token_hex(32),
        protocol_sha256=p.protocol_sha256,
        evaluation_plan_sha256=p.evaluation_plan_sha256,
        entries=(*old_key.entries, *writer.entries),
    )
    commitment = seal_key(home, blinding)
    csv_sha = home.blobs.put_bytes(writer.csv_bytes())
    (out_dir / "trials.csv").write_bytes(home.blobs.get_bytes(csv_sha))
    subjects = [artifact(home.blobs, f"packet:{r.rater_id}", r.tree_sha256, TREE_MEDIA_TYPE) for r in (*p.packets, *writer.packets)]
    subjects.append(artifact(home.blobs, "trials_csv", csv_sha, "text/csv"))
    if protocol.completion.code != "none":
        codes_sha = home.blobs.put_bytes(writer.codes_bytes())
        (out_dir / COMPLETION_CODES).write_bytes(home.blobs.get_bytes(codes_sha))
        subjects.append(artifact(home.blobs, "completion_codes", codes_sha, "text/csv"))
    subjects += [
        artifact(home.blobs, "attention_audio", r.source_sha256, "audio/wav")
        for src, r in sorted(renderer.sources.items())
        if src.startswith("attention:")
    ]
    parameters = p.model_copy(
        update={
            "key_commitment_sha256": commitment,
            "packets": (*p.packets, *writer.packets),
            "balance": _merged_audit(p.balance, design.audit, [r.trials for r in p.packets]),
            "loudness": renderer.report,
            "skipped": design.skipped,
            "leak_check": leaks,
            "extension": PacketExtension(
                parent_receipt_sha256=parent_rid, raters_added=tuple(new_ids), raters_per_prompt=k, extension=number
            ),
        }
    )
    receipt = build_receipt(
        PacketSetReceipt,
        flow=flow,
        task="extend_packets",
        started_at=started,
        key=key,
        subjects=subjects,
        inputs=[
            InputRef(role="packet_set", sha256=parent_rid, ref="receipt"),
            InputRef(role="stimuli", sha256=p.stimuli_sha256, ref="artifact"),
        ],
        parameters=PacketSetParameters.model_validate(parameters.model_dump()),
    )
    return PacketSetOutcome(home.record(receipt), receipt, False, writer.dirs)


def _incidence(entries: tuple[KeyEntry, ...], raters: list[str], prompts: list[str]) -> np.ndarray:
    """Raters x prompts: which prompts each rater rates (a candidate stimulus or the hidden reference of it)."""
    col, row = {p: j for j, p in enumerate(prompts)}, {r: i for i, r in enumerate(raters)}
    out = np.zeros((len(raters), len(prompts)), dtype=np.int64)
    for e in entries:
        if e.role in ("stimulus", "hidden_reference") and e.rater_id in row and e.prompt_id in col and not e.trial_id.startswith("f"):
            out[row[e.rater_id], col[e.prompt_id]] = 1
    return out


def _turns(home: Home, parent: PacketSetReceipt, entries: tuple[KeyEntry, ...], stimuli: StimulusSet) -> Counter[tuple[str, ...]]:
    """How often the parent's scored trials used each layout, keyed as ``design._Builder.rotation`` keys them.

    One ACR or SMOS layout per rater and prompt (every candidate of the prompt), one per MUSHRA screen
    (its candidates, then its anchors), one per A/B pair and per comparison gold item. The new raters'
    rotations continue from these counts, so a candidate's position counts over old and new packets
    differ by at most one where the parent's did.
    """
    key = {e.pseudonym: e for e in entries}
    cands: dict[str, list[str]] = {}
    for s in stimuli.stimuli:
        cands.setdefault(s.prompt_id, []).append(s.candidate)
    out: Counter[tuple[str, ...]] = Counter()
    for ref in parent.parameters.packets:
        files = {e.path: e.sha256 for e in load_manifest(home.blobs, ref.tree_sha256).entries}
        manifest = PacketManifest.model_validate_json(home.blobs.get_bytes(files["packet.json"]))
        laid: set[tuple[str, str]] = set()
        for t in manifest.trials:
            e = [key[name] for name in t.stimuli]
            if t.task in ("acr", "smos") and e[0].role == "stimulus" and (t.task, e[0].prompt_id) not in laid:
                laid.add((t.task, e[0].prompt_id))
                out[(t.task, *sorted(cands[e[0].prompt_id]))] += 1
            elif t.task == "mushra":
                anchors = sorted(x.candidate for x in e if x.role.endswith("_anchor"))
                out[("mushra", t.criteria[0], *sorted(x.candidate for x in e if not x.role.endswith("_anchor")), *anchors)] += 1
            elif t.task == "ab" and all(x.role == "stimulus" for x in e):
                out[("ab", *sorted(x.candidate for x in e))] += 1
            elif t.task == "ab":
                out[("comparison_gold",)] += 1
    return out


def _merged_audit(old: BalanceAudit, new: BalanceAudit, old_trials: list[int]) -> BalanceAudit:
    """The new design's audit (over old and new incidence) with position counts and packet sizes of both."""
    counts: dict[tuple[str, str], Counter[int]] = {}
    for pb in (*old.positions, *new.positions):
        c = counts.setdefault((pb.task, pb.candidate), Counter())
        for i, n in enumerate(pb.counts):
            c[i] += n
    positions = tuple(
        PositionBalance(task=task, candidate=cand, counts=tuple(c[i] for i in range(max(c) + 1)))  # type: ignore[arg-type]
        for (task, cand), c in sorted(counts.items())
    )
    sizes = [*old_trials, new.trials_per_rater_min, new.trials_per_rater_max]
    return new.model_copy(
        update={
            "positions": positions,
            "position_spread_max": max((max(p.counts) - min(p.counts) for p in positions), default=0),
            "trials_per_rater_min": min(sizes),
            "trials_per_rater_max": max(sizes),
        }
    )


def _old_files(home: Home, parent: PacketSetReceipt, entries: tuple[KeyEntry, ...]) -> list[PacketFile]:
    """Every file of the parent's packets as the leak check sees them (read from the stored trees)."""
    key = {e.pseudonym: e for e in entries}
    out = []
    for ref in parent.parameters.packets:
        files = {e.path: e.sha256 for e in load_manifest(home.blobs, ref.tree_sha256).entries}
        manifest = PacketManifest.model_validate_json(home.blobs.get_bytes(files["packet.json"]))
        paths = {a.id: a.file for a in manifest.audio}
        for t in (*manifest.trials, *manifest.familiarisation):
            for name in (*t.stimuli, *([t.reference] if t.reference else [])):
                e = key[name]
                kind = "anchor" if e.role.endswith("_anchor") else "attention" if e.role == "attention" else "stim"
                source = "" if kind == "attention" else f"{kind}:{e.prompt_id}:{e.candidate}"
                pcm = _pcm(home.blobs.get_bytes(files[paths[name]]))
                out.append(PacketFile(ref.rater_id, name, t.id, t.task, e.role, e.candidate, e.prompt_id, pcm, source))
    return out


def _pcm(data: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(data)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def _materialize(home: Home, receipt: PacketSetReceipt, out_dir: Path) -> dict[str, Path]:
    """Write a cached extension's added packets (and its CSVs) out again."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ext = receipt.parameters.extension
    added = set(ext.raters_added) if ext else set()
    dirs = {}
    for r in receipt.parameters.packets:
        if r.rater_id in added:
            dirs[r.rater_id] = out_dir / r.rater_id
            materialize_tree(home.blobs, r.tree_sha256, dirs[r.rater_id])
    home.blobs.export(receipt.subject("trials_csv").sha256, out_dir / "trials.csv")
    if receipt.parameters.completion_code != "none":
        home.blobs.export(receipt.subject("completion_codes").sha256, out_dir / COMPLETION_CODES)
    return dirs
