"""Aggregate rater submissions: verify, unblind, screen, compute statistics, record receipts.

Each accepted submission gets a ``submission`` receipt; the ``aggregate`` receipt lists every
refused file and row with its reason, the attrition, the screening outcome per rater and the
statistics. Opening the sealed blinding key puts it into the store, where it hashes to the
commitment in the packet-set receipt, and makes it an input of the aggregate receipt.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes, sha256_hex
from voxledger.schemas.errors import PacketError, ReceiptError
from voxledger.schemas.listening import BlindingKey, KeyEntry, ListeningProtocol
from voxledger.schemas.listening_receipts import (
    AggregateParameters,
    AggregateReceipt,
    AggregateResult,
    Agreement,
    Attrition,
    MissingCell,
    PacketSetReceipt,
    RatingRow,
    SubmissionParameters,
    SubmissionReceipt,
    SubmissionRejection,
)
from voxledger.stores.home import Home
from voxledger.stores.receipts import receipt_document
from voxledger.tasks.listening import stats
from voxledger.tasks.listening.keys import home_secret, open_sealed_key
from voxledger.tasks.listening.screening import screen_rater
from voxledger.tasks.listening.verify import (
    Checked,
    Packet,
    check_submission,
    load_packets,
    rated_stimuli,
)
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, reuse

RATINGS_MEDIA_TYPE = "application/vnd.voxledger.ratings+json"
SCREENING_ROLES = ("gold", "attention", "hidden_reference")


@dataclass(frozen=True)
class AggregateOutcome(StageOutcome[AggregateReceipt]):
    """An aggregate stage outcome plus the accepted submissions' receipt ids."""

    submission_receipts: tuple[str, ...] = ()


def load_packet_set(home: Home, receipt_id: str) -> PacketSetReceipt:
    """The packet-set receipt with this id; ReceiptError when it is another kind."""
    doc = home.receipts.read_document(receipt_id)
    if doc.get("kind") != "packet_set":
        raise ReceiptError(f"receipt {receipt_id} is a {doc.get('kind')!r} receipt, not a packet_set; pass the id `packets export` printed")
    return PacketSetReceipt.model_validate(doc)


def aggregate_ratings(home: Home, packet_set_id: str, submissions: list[Path], *, flow: str = "cli") -> AggregateOutcome:
    """Verify ``submissions`` against the packet set and record the aggregate.

    Refused files and rows are listed in the receipt with their reasons. Nothing is written until
    every file is verified and the statistics are computed; then the submission receipts and the
    aggregate are committed in one catalog transaction, so a failure leaves the home as it was and
    locks no rater out. Raises PacketError when no submission is accepted (naming every reason),
    ReceiptError for a wrong receipt.
    """
    started = utc_now()
    ps = load_packet_set(home, packet_set_id)
    protocol = ListeningProtocol.model_validate_json(home.blobs.get_bytes(ps.parameters.protocol_sha256))
    packets = load_packets(home.blobs, ps)
    files = [(p.name, _read(p)) for p in submissions]
    key = cache_key(
        "aggregate",
        {"packet_set": packet_set_id, **{f"submission:{i}": sha256_hex(d) for i, (_, d) in enumerate(files)}},
        ps.parameters.protocol_sha256,
        {},
    )
    hit = reuse(home, key, AggregateReceipt)
    if hit is not None:
        subs = tuple(i.sha256 for i in hit.receipt.inputs if i.role == "submission")
        return AggregateOutcome(hit.receipt_id, hit.receipt, True, subs)
    blinding, key_bytes = open_sealed_key(home, ps.parameters.key_commitment_sha256)
    verdicts = _verify_all(home, packet_set_id, files, packets, home_secret(home), protocol, {e.pseudonym: e for e in blinding.entries})
    if not verdicts.accepted:
        raise PacketError(
            f"no submission accepted ({len(verdicts.rejections)} refused): "
            + "; ".join(f"{r.file}: {r.reason}" for r in verdicts.rejections)
        )
    result, rows = _result(protocol, packets, verdicts, blinding)
    # everything above only read; from here on blobs, then receipts, then one catalog commit
    key_sha = home.blobs.put_bytes(key_bytes)
    rows_sha = home.blobs.put_bytes(canonical_bytes([r.model_dump(mode="json") for r in rows]))
    csv_sha = home.blobs.put_bytes(ratings_csv(rows))
    known, fresh = _submission_receipts(home, packet_set_id, verdicts.accepted, flow)
    sub_ids = tuple(known.get(c.sha256) or _receipt_id(fresh[c.sha256]) for c in verdicts.accepted)
    receipt = build_receipt(
        AggregateReceipt,
        flow=flow,
        task="aggregate_ratings",
        started_at=started,
        key=key,
        subjects=[artifact(home.blobs, "ratings", rows_sha, RATINGS_MEDIA_TYPE), artifact(home.blobs, "ratings_csv", csv_sha, "text/csv")],
        inputs=[
            InputRef(role="packet_set", sha256=packet_set_id, ref="receipt"),
            InputRef(role="blinding_key", sha256=key_sha, ref="artifact"),
            *(InputRef(role="submission", sha256=s, ref="receipt") for s in sorted(set(sub_ids))),
        ],
        parameters=AggregateParameters(
            packet_set_receipt_sha256=packet_set_id,
            protocol_sha256=ps.parameters.protocol_sha256,
            key_commitment_sha256=key_sha,
            screening=protocol.screening,
            statistics=protocol.statistics,
        ),
        result=result,
    )
    ids = home.record_many([*fresh.values(), receipt])
    if ids[:-1] != [_receipt_id(r) for r in fresh.values()]:
        raise ReceiptError("submission receipt ids changed while recording; run the aggregation again")
    return AggregateOutcome(ids[-1], receipt, False, sub_ids)


def _receipt_id(receipt: SubmissionReceipt) -> str:
    """The id ``ReceiptStore.write`` will give this receipt (the sha256 of its canonical document)."""
    return sha256_hex(canonical_bytes(receipt_document(receipt)))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise PacketError(f"cannot read submission {path}: {exc.strerror}") from exc


def _prior_submissions(home: Home, packet_set_id: str) -> dict[str, str]:
    """packet digest -> submission digest that an earlier aggregate of this packet set accepted.

    Only submissions that are inputs of an aggregate count: a submission receipt left without
    its aggregate (by a run that failed before its commit) never locks its rater out.
    """
    from voxledger.stores.queries import aggregated_submissions

    return aggregated_submissions(home.catalog, packet_set_id)


@dataclass
class Verdicts:
    """Accepted files, refused files, and the screening items each accepted file lacks."""

    accepted: list[Checked] = field(default_factory=list)
    rejections: list[SubmissionRejection] = field(default_factory=list)
    missing_screening: dict[str, list[str]] = field(default_factory=dict)  # submission sha256 -> missing items


def screening_cells(packet: Packet, key: dict[str, KeyEntry]) -> dict[tuple[str, str, str], str]:
    """(trial, stimulus, criterion) -> role of every gold, attention and hidden-reference rating the packet asks for."""
    return {
        (t.id, s, crit): key[s].role
        for t in packet.manifest.trials
        for crit in t.criteria
        for s in rated_stimuli(t)
        if s in key and key[s].role in SCREENING_ROLES
    }


def _missing_screening(c: Checked, key: dict[str, KeyEntry]) -> list[str]:
    got = {(r.trial, r.stimulus, r.criterion) for r in c.accepted}
    return [
        f"{role} {trial}/{crit}"
        for (trial, stim, crit), role in sorted(screening_cells(c.packet, key).items())
        if (trial, stim, crit) not in got
    ]


def _verify_all(
    home: Home,
    packet_set_id: str,
    files: list[tuple[str, bytes]],
    packets: dict[str, Packet],
    secret: bytes,
    protocol: ListeningProtocol,
    key: dict[str, KeyEntry],
) -> Verdicts:
    out = Verdicts()
    prior = _prior_submissions(home, packet_set_id)
    by_sha: dict[str, str] = {}
    for name, data in files:
        sha = sha256_hex(data)
        try:
            if sha in by_sha:
                raise PacketError(f"duplicate: the same bytes as {by_sha[sha]}")
            c = check_submission(name, data, packets, secret, protocol.checks)
            missing = _missing_screening(c, key)
            if missing and protocol.checks.missing_screening == "refuse":
                raise PacketError(
                    f"missing screening items: {len(missing)} absent or refused ({', '.join(missing[:6])}); "
                    "the page always exports them, so this file was edited or is incomplete"
                )
            earlier = next((a for a in out.accepted if a.packet.packet_sha256 == c.packet.packet_sha256), None)
            if earlier is not None or prior.get(c.packet.packet_sha256, sha) != sha:
                where = earlier.name if earlier else f"an earlier aggregation ({prior[c.packet.packet_sha256][:12]})"
                raise PacketError(f"replay: packet of rater {c.packet.rater_id} already has an accepted submission ({where})")
            if any(a.submission.session_id == c.submission.session_id for a in out.accepted):
                raise PacketError(f"replay: session {c.submission.session_id} was already submitted for another packet")
        except PacketError as exc:
            out.rejections.append(SubmissionRejection(file=name, submission_sha256=sha, reason=str(exc)))
        else:
            out.accepted.append(c)
            if missing:
                out.missing_screening[c.sha256] = missing
        by_sha.setdefault(sha, name)
    return out


def _submission_receipts(
    home: Home, packet_set_id: str, accepted: list[Checked], flow: str
) -> tuple[dict[str, str], dict[str, SubmissionReceipt]]:
    """Receipts already recorded (submission sha256 -> id) and fresh ones to record, built but not written."""
    known: dict[str, str] = {}
    fresh: dict[str, SubmissionReceipt] = {}
    for c in accepted:
        started = utc_now()
        key = cache_key("submission", {"packet_set": packet_set_id, "submission": c.sha256}, c.packet.manifest.protocol_sha256, {})
        hit = reuse(home, key, SubmissionReceipt)
        if hit:
            known[c.sha256] = hit.receipt_id
            continue
        sub_sha = home.blobs.put_bytes(c.data)
        fresh[c.sha256] = build_receipt(
            SubmissionReceipt,
            flow=flow,
            task="verify_submission",
            started_at=started,
            key=key,
            subjects=[artifact(home.blobs, "submission", sub_sha, "application/json")],
            inputs=[
                InputRef(role="packet_set", sha256=packet_set_id, ref="receipt"),
                InputRef(role="packet", sha256=c.packet.tree_sha256, ref="artifact"),
            ],
            parameters=SubmissionParameters(
                packet_set_receipt_sha256=packet_set_id,
                rater_id=c.packet.rater_id,
                packet_sha256=c.packet.packet_sha256,
                submission_sha256=c.sha256,
                session_id=c.submission.session_id,
                accepted_rows=len(c.accepted),
                rejected_rows=tuple(c.rejected),
                plays=c.plays,
                listening_s=c.listening_s,
                log_check=c.log_check,
            ),
        )
    return known, fresh


def _unblind(c: Checked, key: dict[str, KeyEntry]) -> list[RatingRow]:
    rows = []
    for r in c.accepted:
        e = key[r.stimulus]
        trial = c.packet.trials[r.trial]
        a = key[trial.stimuli[0]] if trial.task == "ab" else None
        rows.append(
            RatingRow(
                rater_id=c.packet.rater_id,
                stimulus=r.stimulus,
                trial=r.trial,
                role=e.role,
                task=trial.task,
                criterion=r.criterion,
                candidate=e.candidate,
                prompt_id=e.prompt_id,
                category=e.category,
                score=r.score,
                audio_sha256=e.audio_sha256,
                versus_candidate=a.candidate if a else None,
                versus_audio_sha256=a.audio_sha256 if a else None,
                included=True,
            )
        )
    return rows


def _attrition(packets: dict[str, Packet], accepted: list[Checked]) -> Attrition:
    by_packet = {c.packet.packet_sha256: c for c in accepted}
    cells: list[MissingCell] = []
    missing_raters, total = [], 0
    for sha, packet in sorted(packets.items(), key=lambda kv: kv[1].rater_id):
        expected = [(t.id, s, crit) for t in packet.manifest.trials for crit in t.criteria for s in rated_stimuli(t)]
        c = by_packet.get(sha)
        if c is None:
            missing_raters.append(packet.rater_id)
            total += len(expected)
            continue
        got = {(r.trial, r.stimulus, r.criterion) for r in c.accepted}
        refused = {(r.trial, r.stimulus, r.criterion) for r in c.rejected}
        for cell in expected:
            if cell not in got:
                cells.append(
                    MissingCell(
                        rater_id=packet.rater_id,
                        trial=cell[0],
                        stimulus=cell[1],
                        criterion=cell[2],
                        reason="row refused" if cell in refused else "not rated",
                    )
                )
    return Attrition(missing_raters=tuple(missing_raters), missing_cells=total + len(cells), cells=tuple(cells))


def _result(
    protocol: ListeningProtocol, packets: dict[str, Packet], verdicts: Verdicts, blinding: BlindingKey
) -> tuple[AggregateResult, list[RatingRow]]:
    accepted = verdicts.accepted
    key = {e.pseudonym: e for e in blinding.entries}
    expected = {e.pseudonym: e.expected for e in blinding.entries}
    check = protocol.check_criterion()
    rows, screening = [], []
    for c in sorted(accepted, key=lambda c: c.packet.rater_id):
        mine = _unblind(c, key)
        verdict = screen_rater(c.packet.rater_id, mine, expected, protocol.screening, check.name if check else None)
        missing = verdicts.missing_screening.get(c.sha256)
        if missing:  # checks.missing_screening == "fail_screening": an omitted check is a failed check
            why = f"missing screening items: {len(missing)} absent or refused ({', '.join(missing[:6])})"
            verdict = verdict.model_copy(update={"included": False, "reasons": (*verdict.reasons, why)})
        screening.append(verdict)
        rows += [r.model_copy(update={"included": verdict.included}) for r in mine]
    included = {s.rater_id for s in screening if s.included}
    kept = [r for r in rows if r.included]
    spec = protocol.statistics
    directions = {c.name: c.direction for c in protocol.criteria}
    ranges = {c.name: (float(c.scale.min), float(c.scale.max)) for c in protocol.criteria}
    result = AggregateResult(
        submissions_accepted=len(accepted),
        rejections=tuple(verdicts.rejections),
        rejected_rows=sum(len(c.rejected) for c in accepted),
        screening=tuple(screening),
        attrition=_attrition(packets, accepted),
        scores=tuple(stats.candidate_scores(kept, spec, ranges)),
        deltas=tuple(stats.paired_deltas(kept, spec, directions, ranges)),
        bradley_terry=tuple(stats.bradley_terry(kept, c.name, spec) for c in protocol.criteria if c.task == "ab" and _has_ab(kept, c.name)),
        agreement=tuple(_labelled(stats.agreement(kept, c.name, c.task), c.task) for c in protocol.criteria),
        agreement_candidates_only=tuple(
            stats.agreement([r for r in kept if r.role == "stimulus"], c.name, c.task) for c in protocol.criteria
        ),
        bias=tuple(stats.rater_bias(rows, included)),
        rating_rows=len(rows),
    )
    return result, rows


def _has_ab(rows: list[RatingRow], criterion: str) -> bool:
    """Whether any kept A/B comparison exists (Bradley-Terry has nothing to fit otherwise)."""
    return any(r.task == "ab" and r.criterion == criterion and r.versus_candidate for r in rows)


def _labelled(a: Agreement, task: str) -> Agreement:
    """Say when an agreement value counts screening items (MUSHRA hidden reference and anchor)."""
    if task != "mushra":
        return a
    label = "includes the hidden reference and low anchor; see agreement_candidates_only"
    return a.model_copy(update={"note": f"{a.note}; {label}" if a.note else label})


def ratings_csv(rows: list[RatingRow]) -> bytes:
    """The unblinded ratings as CSV (one row per rating, columns as in the ``ratings`` table)."""
    buf = io.StringIO()
    fields = list(RatingRow.model_fields)
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r.model_dump(mode="json"))
    return buf.getvalue().encode("utf-8")
