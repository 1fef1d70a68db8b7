"""Aggregate rater submissions: verify, unblind, screen, compute statistics, record receipts.

Each accepted submission gets a ``submission`` receipt; the ``aggregate`` receipt lists every
refused file and row with its reason, the attrition, the screening outcome per rater and the
statistics. Opening the sealed blinding key puts it into the store, where it hashes to the
commitment in the packet-set receipt, and makes it an input of the aggregate receipt.

Longer than 500 lines on purpose: verifying, unblinding, screening and aggregating are one ordered
procedure over the same rows, and each step's refusals are reported in the one aggregate receipt.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import Timeout

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes, sha256_hex
from voxledger.schemas.errors import CatalogLockedError, PacketError, ReceiptError
from voxledger.schemas.listening import BlindingKey, KeyEntry, ListeningProtocol
from voxledger.schemas.listening_receipts import (
    AggregateParameters,
    AggregateReceipt,
    AggregateResult,
    Agreement,
    Attrition,
    MissingCell,
    PacketSetReceipt,
    PairedDelta,
    RatingRow,
    SubmissionParameters,
    SubmissionReceipt,
    SubmissionRejection,
)
from voxledger.schemas.listening_robustness import Robustness
from voxledger.settings import load_settings
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.home import Home
from voxledger.stores.queries import evaluation_observations
from voxledger.stores.receipts import receipt_document
from voxledger.tasks.listening import predictors, robustness, stats
from voxledger.tasks.listening.keys import home_secret, open_sealed_key
from voxledger.tasks.listening.screening import screen_rater
from voxledger.tasks.listening.verify import (
    MAX_SUBMISSION_BYTES,
    Checked,
    Packet,
    check_submission,
    load_packets,
    rated_stimuli,
)
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import AggregateOutcome, reuse

RATINGS_MEDIA_TYPE = "application/vnd.voxledger.ratings+json"
SCREENING_ROLES = ("gold", "attention", "hidden_reference")
COMMIT_JOURNAL = "ratings-commit.json"  # beside the catalog: the receipts of the commit in progress


def load_packet_set(home: Home, receipt_id: str) -> PacketSetReceipt:
    """The packet-set receipt with this id; ReceiptError when it is another kind."""
    doc = home.receipts.read_document(receipt_id)
    if doc.get("kind") != "packet_set":
        raise ReceiptError(f"receipt {receipt_id} is a {doc.get('kind')!r} receipt, not a packet_set; pass the id `packets export` printed")
    return PacketSetReceipt.model_validate(doc)


def aggregate_ratings(home: Home, packet_set_id: str, submissions: list[Path], *, flow: str = "cli") -> AggregateOutcome:
    """Verify ``submissions`` against the packet set and record the aggregate.

    Refused files and rows are listed in the receipt with their reasons; a file that cannot be
    read, parsed or checked is refused on its own and the batch goes on. Every file is checked
    first, without the catalog lock. The accept decision (one submission per packet, one packet
    per session, against aggregates already committed) and the statistics are then taken under
    the catalog's lock, which is held until the aggregate is committed, so two aggregations can
    never both accept a packet. The aggregate receipt is the commit point: see ``_commit``.
    Raises PacketError when no submission is accepted (naming every reason), ReceiptError for a
    wrong receipt, CatalogLockedError when another process holds the catalog too long.
    """
    started = utc_now()
    home.require_writable()
    ps = load_packet_set(home, packet_set_id)
    protocol = ListeningProtocol.model_validate_json(home.blobs.get_bytes(ps.parameters.protocol_sha256))
    packets = load_packets(home.blobs, ps)
    files = [(p.name, _read(p)) for p in submissions]
    key = cache_key(
        "aggregate",
        {"packet_set": packet_set_id, **{f"submission:{i}": _digest(d) for i, (_, d) in enumerate(files)}},
        ps.parameters.protocol_sha256,
        {},
    )
    hit = _cached(home, key)
    if hit is not None:
        return hit
    blinding, key_bytes = open_sealed_key(home, ps.parameters.key_commitment_sha256)
    by_pseudonym = {e.pseudonym: e for e in blinding.entries}
    checked = _check_all(files, packets, home_secret(home), protocol, by_pseudonym)
    key_sha = home.blobs.put_bytes(key_bytes)  # content-addressed: an unreferenced blob is harmless
    with commit_lock(home):
        _recover(home)
        hit = _cached(home, key)  # an identical run committed while this one was checking
        if hit is not None:
            return hit
        verdicts = _decide(home, packet_set_id, checked)
        if not verdicts.accepted:
            raise PacketError(
                f"no submission accepted ({len(verdicts.rejections)} refused): "
                + "; ".join(f"{r.file}: {r.reason}" for r in verdicts.rejections)
            )
        observed = evaluation_observations(home.catalog, ps.parameters.evaluation_plan_sha256)
        result, rows = _result(protocol, packets, verdicts, blinding, home.blobs, observed)
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
            subjects=[
                artifact(home.blobs, "ratings", rows_sha, RATINGS_MEDIA_TYPE),
                artifact(home.blobs, "ratings_csv", csv_sha, "text/csv"),
            ],
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
        rid = _commit(home, list(fresh.values()), receipt)
    return AggregateOutcome(rid, receipt, False, sub_ids)


def _cached(home: Home, key: str) -> AggregateOutcome | None:
    hit = reuse(home, key, AggregateReceipt)
    if hit is None:
        return None
    subs = tuple(i.sha256 for i in hit.receipt.inputs if i.role == "submission")
    return AggregateOutcome(hit.receipt_id, hit.receipt, True, subs, verified=hit.verified)


@contextmanager
def commit_lock(home: Home) -> Iterator[None]:
    """Hold the catalog's lock (the one every catalog connection takes) for a whole decision and commit."""
    _test_pause("waiting for the commit lock")
    try:
        home.catalog.lock.acquire(timeout=home.catalog.lock_timeout_s)
    except Timeout as exc:
        raise CatalogLockedError(
            f"catalog {home.catalog.path} is locked by another voxledger process for more than "
            f"{home.catalog.lock_timeout_s:g} s; wait for it to finish or raise --lock-timeout"
        ) from exc
    try:
        yield
    finally:
        home.catalog.lock.release()


def _journal(home: Home) -> Path:
    return home.catalog.path.with_name(COMMIT_JOURNAL)


def _commit(home: Home, submissions: list[SubmissionReceipt], aggregate: AggregateReceipt) -> str:
    """Record the submission receipts, then the aggregate receipt (the commit point), then index them.

    Called under ``commit_lock``. A journal names the receipts first; the next aggregation (under
    the same lock) finishes an interrupted commit: when the aggregate's receipt reached the store
    it is indexed (it was committed, and ``catalog rebuild`` would index it too); when it did
    not, the submission receipts written before it are orphans that no aggregate names, so they
    count for nothing, after a rebuild as before it.
    """
    for r in [*submissions, aggregate]:
        home.check_subjects(r)
    rid = _receipt_id_of(aggregate)
    journal = _journal(home)
    tmp = journal.with_suffix(".tmp")
    tmp.write_text(json.dumps({"aggregate": rid, "submissions": [_receipt_id(r) for r in submissions]}), encoding="utf-8")
    os.replace(tmp, journal)
    written = [home.receipts.write(r) for r in submissions]
    if [w[0] for w in written] != [_receipt_id(r) for r in submissions]:
        raise ReceiptError("submission receipt ids changed while recording; run the aggregation again")
    _test_pause("submission receipts written, aggregate not yet")
    written.append(home.receipts.write(aggregate))
    home.catalog.ingest(written, home.blobs.get_bytes)
    journal.unlink()
    return rid


def _recover(home: Home) -> None:
    """Finish a commit a killed aggregation left half done (see ``_commit``); called under ``commit_lock``."""
    journal = _journal(home)
    if not journal.is_file():
        return
    try:
        names = json.loads(journal.read_text(encoding="utf-8"))
        ids = [*names["submissions"], names["aggregate"]]
    except (ValueError, KeyError, TypeError):  # torn before os.replace cannot happen; a hand-edited journal can
        ids = []
    if ids and home.receipts.has(ids[-1]):
        home.catalog.ingest([(i, home.receipts.read_document(i)) for i in ids], home.blobs.get_bytes)
    journal.unlink()


def _receipt_id_of(receipt: AggregateReceipt) -> str:
    return sha256_hex(canonical_bytes(receipt_document(receipt)))


def _receipt_id(receipt: SubmissionReceipt) -> str:
    """The id ``ReceiptStore.write`` will give this receipt (the sha256 of its canonical document)."""
    return sha256_hex(canonical_bytes(receipt_document(receipt)))


def _read(path: Path) -> bytes | PacketError:
    """The file's bytes (at most one byte past the size limit), or why it cannot be read."""
    try:
        with path.open("rb") as f:
            return f.read(MAX_SUBMISSION_BYTES + 1)
    except OSError as exc:
        return PacketError(f"cannot read the file: {exc.strerror or exc}")


def _digest(data: bytes | PacketError) -> str:
    return sha256_hex(data) if isinstance(data, bytes) else sha256_hex(str(data).encode("utf-8"))


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


@dataclass(frozen=True)
class FileCheck:
    """One file after the checks that need no catalog: checked, or refused with the reason."""

    name: str
    sha256: str
    checked: Checked | None = None
    missing: tuple[str, ...] = ()
    reason: str | None = None


def _check_all(
    files: list[tuple[str, bytes | PacketError]],
    packets: dict[str, Packet],
    secret: bytes,
    protocol: ListeningProtocol,
    key: dict[str, KeyEntry],
) -> list[FileCheck]:
    """Check every file on its own: whatever goes wrong with one file refuses that file only."""
    out = []
    for name, data in files:
        sha = _digest(data)
        try:
            if isinstance(data, PacketError):
                raise data
            c = check_submission(name, data, packets, secret, protocol.checks)
            missing = _missing_screening(c, key)
            if missing and protocol.checks.missing_screening == "refuse":
                raise PacketError(
                    f"missing screening items: {len(missing)} absent or refused ({', '.join(missing[:6])}); "
                    "the page always exports them, so this file was edited or is incomplete"
                )
        except PacketError as exc:
            out.append(FileCheck(name, sha, reason=str(exc)))
        except Exception as exc:  # noqa: BLE001  (one file's failure refuses that file; the batch goes on)
            out.append(FileCheck(name, sha, reason=f"could not be checked ({type(exc).__name__}: {exc}); the other files are not affected"))
        else:
            out.append(FileCheck(name, sha, c, tuple(missing)))
    return out


def _decide(home: Home, packet_set_id: str, files: list[FileCheck]) -> Verdicts:
    """Accept or refuse each checked file against the committed aggregates; called under ``commit_lock``.

    One accepted submission per packet and one packet per session id, across raters and runs.
    Only submissions an aggregate names count, so a run that failed or was killed before its
    aggregate reached the store never locks a rater out.
    """
    from voxledger.stores.queries import aggregated_sessions, aggregated_submissions

    prior = aggregated_submissions(home.catalog, packet_set_id)
    sessions = aggregated_sessions(home.catalog, packet_set_id)
    out = Verdicts()
    by_sha: dict[str, str] = {}
    for f in files:
        reason = f.reason
        c = f.checked
        if reason is None and f.sha256 in by_sha:
            reason = f"duplicate: the same bytes as {by_sha[f.sha256]}"
        elif reason is None and c is not None:
            reason = _replay(c, out.accepted, prior, sessions)
        by_sha.setdefault(f.sha256, f.name)
        if reason is not None or c is None:
            out.rejections.append(SubmissionRejection(file=f.name, submission_sha256=f.sha256, reason=reason or "not checked"))
            continue
        out.accepted.append(c)
        if f.missing:
            out.missing_screening[c.sha256] = list(f.missing)
    _test_pause("accept decision taken")
    return out


class _Released(Exception):
    """A test ended a test pause (SIGUSR1)."""


def _release(signum: int, frame: object) -> None:
    raise _Released


def _test_pause(where: str) -> None:
    """Tests only (``VOXLEDGER_TEST_COMMIT_DELAY_S``, docs/settings.md): wait here, saying where on stderr.

    Called before taking the commit lock, after the accept decision and again before the aggregate
    receipt is written, so a test can start a second aggregation or kill this one inside the window
    between decision and commit. On the main thread a SIGUSR1 ends the wait early (its handler is in
    place before the announcement), so a test moves on at events, not on a clock.
    """
    delay = load_settings().test_commit_delay_s
    if not delay:
        return
    main = hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGUSR1, _release) if main else None
    try:
        sys.stderr.write(f"voxledger test pause: {where} ({delay:g} s)\n")
        sys.stderr.flush()
        time.sleep(delay)
    except _Released:
        pass
    finally:
        if main:
            signal.signal(signal.SIGUSR1, previous)


def _replay(c: Checked, accepted: list[Checked], prior: dict[str, str], sessions: dict[str, tuple[str, str]]) -> str | None:
    packet, session = c.packet.packet_sha256, c.submission.session_id
    earlier = next((a for a in accepted if a.packet.packet_sha256 == packet), None)
    if earlier is not None:
        return f"replay: packet of rater {c.packet.rater_id} already has an accepted submission ({earlier.name})"
    if prior.get(packet, c.sha256) != c.sha256:
        return (
            f"replay: packet of rater {c.packet.rater_id} already has an accepted submission (an earlier aggregation, {prior[packet][:12]})"
        )
    twin = next((a for a in accepted if a.submission.session_id == session), None)
    if twin is not None:
        return f"replay: session {session} was already submitted for another packet ({twin.name}, rater {twin.packet.rater_id})"
    sha, rater = sessions.get(session, (c.sha256, c.packet.rater_id))
    if sha != c.sha256:
        return f"replay: session {session} was already accepted for rater {rater} in an earlier aggregation ({sha[:12]})"
    return None


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
    protocol: ListeningProtocol,
    packets: dict[str, Packet],
    verdicts: Verdicts,
    blinding: BlindingKey,
    blobs: LocalBlobStore,
    observed: Mapping[tuple[str, str], dict[str, float]],
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
    deltas = stats.paired_deltas(kept, spec, directions, ranges)
    result = AggregateResult(
        submissions_accepted=len(accepted),
        rejections=tuple(verdicts.rejections),
        rejected_rows=sum(len(c.rejected) for c in accepted),
        screening=tuple(screening),
        attrition=_attrition(packets, accepted),
        scores=tuple(stats.candidate_scores(kept, spec, ranges)),
        screening_scores=tuple(stats.screening_scores(kept, spec, ranges)),
        deltas=tuple(deltas),
        bradley_terry=tuple(stats.bradley_terry(kept, c.name, spec) for c in protocol.criteria if c.task == "ab" and _has_ab(kept, c.name)),
        agreement=tuple(_labelled(stats.agreement(kept, c.name, c.task), c.task) for c in protocol.criteria),
        agreement_candidates_only=tuple(
            stats.agreement([r for r in kept if r.role == "stimulus"], c.name, c.task) for c in protocol.criteria
        ),
        bias=tuple(stats.rater_bias(rows, included)),
        rating_rows=len(rows),
        robustness=_robustness(rows, deltas, included, protocol, [c.packet for c in accepted], blobs, observed),
    )
    return result, rows


def _robustness(
    rows: list[RatingRow],
    deltas: list[PairedDelta],
    included: set[str],
    protocol: ListeningProtocol,
    packets: list[Packet],
    blobs: LocalBlobStore,
    observed: Mapping[tuple[str, str], dict[str, float]],
) -> Robustness:
    """Bot scores, robust deltas and each included rater's influence (``robustness.assess``)."""
    versus = {(p.rater_id, t.id): t.stimuli[0] for p in packets for t in p.manifest.trials if t.task == "ab"}
    sides = {r.stimulus: (r.candidate, r.prompt_id) for r in rows if r.role == "stimulus"}
    sides |= {versus[(r.rater_id, r.trial)]: (r.versus_candidate or "", r.prompt_id) for r in rows if (r.rater_id, r.trial) in versus}
    features = predictors.packet_features(blobs, packets, set(sides))
    predictors.add_evaluation(features, sides, observed)
    directions = {c.name: c.direction for c in protocol.criteria}
    ranges = {c.name: (float(c.scale.min), float(c.scale.max)) for c in protocol.criteria}
    return robustness.assess(rows, deltas, included, protocol.statistics, directions, ranges, features, versus)


def _has_ab(rows: list[RatingRow], criterion: str) -> bool:
    """Whether any kept A/B comparison exists (Bradley-Terry has nothing to fit otherwise)."""
    return any(r.task == "ab" and r.criterion == criterion and r.versus_candidate and r.role == "stimulus" for r in rows)


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
