"""Verify packets and rater submissions; every refusal names its reason.

A submission is refused whole when it is unreadable, foreign (its packet is not in the set),
forged (the token is not the home's HMAC of the packet digest) or edited (the MAC over its
canonical bytes no longer matches). A file is also refused when it holds a number JSON cannot
carry canonically (NaN, Infinity, an integer beyond +-2^53), when its log is implausible under the
protocol's ``checks`` (see ``plausibility``), or when no row survives. A UTF-8 byte order mark is
accepted. Otherwise each rating row is checked on its own: the trial
and stimulus belong to the packet, the criterion was asked, the score is on the scale, the row
is not a duplicate, and the log shows the trial presented and every needed sample played to the
end before the rating, with the last logged rating equal to the exported score.
"""

from __future__ import annotations

import io
import json
import math
import re
import wave
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from voxledger.schemas.canonical import sha256_hex
from voxledger.schemas.errors import PacketError, error_path
from voxledger.schemas.listening import (
    PacketManifest,
    PacketTrial,
    Scale,
    Submission,
    SubmissionChecks,
    SubmissionRating,
)
from voxledger.schemas.listening_receipts import LogCheck, PacketSetReceipt, RowRejection
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.trees import build_manifest, load_manifest
from voxledger.tasks.listening.keys import submission_mac, tokens_match
from voxledger.tasks.listening.plausibility import check_log

MAX_SUBMISSION_BYTES = 20_000_000
MAX_JSON_INTEGER = 2**53 - 1  # RFC 8785 (I-JSON): larger integers have no exact canonical form
MAX_JSON_DEPTH = 32  # the page writes 3 levels (object, ratings/log array, row object)
MAX_JSON_TEXT = 1024  # characters in any key or string: the longest the page writes is a user agent (~200)


@dataclass(frozen=True)
class Packet:
    """A packet of the set: its manifest, trials by id and scales by criterion."""

    rater_id: str
    packet_sha256: str
    tree_sha256: str
    manifest: PacketManifest
    trials: dict[str, PacketTrial]
    scales: dict[str, Scale]
    durations_s: dict[str, float] = field(default_factory=dict)  # pseudonym -> length of its audio file


@dataclass
class Checked:
    """A submission that passed the file-level checks, with its row verdicts."""

    name: str
    data: bytes
    sha256: str
    submission: Submission
    packet: Packet
    accepted: list[SubmissionRating] = field(default_factory=list)
    rejected: list[RowRejection] = field(default_factory=list)
    plays: int = 0
    listening_s: float = 0.0
    log_check: LogCheck | None = None


def rated_stimuli(trial: PacketTrial) -> tuple[str, ...]:
    """The stimuli that carry a rating: the one ACR or SMOS sample, every MUSHRA sample, B of an A/B pair."""
    return {"acr": trial.stimuli[:1], "ab": trial.stimuli[1:2], "mushra": trial.stimuli, "smos": trial.stimuli[:1]}[trial.task]


def load_packets(blobs: LocalBlobStore, receipt: PacketSetReceipt) -> dict[str, Packet]:
    """Every packet of a set by packet digest, read from the stored trees (each verified)."""
    out = {}
    for ref in receipt.parameters.packets:
        entries = {e.path: e.sha256 for e in load_manifest(blobs, ref.tree_sha256).entries}
        data = blobs.get_bytes(entries["packet.json"])
        if sha256_hex(data) != ref.packet_sha256:
            raise PacketError(f"stored packet.json of rater {ref.rater_id} does not hash to {ref.packet_sha256}")
        manifest = PacketManifest.model_validate_json(data)
        durations = {a.id: wav_duration_s(blobs.get_bytes(entries[a.file])) for a in manifest.audio if a.file in entries}
        out[ref.packet_sha256] = Packet(
            ref.rater_id,
            ref.packet_sha256,
            ref.tree_sha256,
            manifest,
            {t.id: t for t in manifest.trials},
            {c.name: c.scale for c in manifest.criteria},
            durations,
        )
    return out


def wav_duration_s(data: bytes) -> float:
    """Length in seconds of a packet's PCM WAV file (from its header)."""
    with wave.open(io.BytesIO(data)) as w:
        out: float = w.getnframes() / w.getframerate()
        return out


def verify_packet_dir(folder: Path) -> PacketManifest:
    """Check a packet folder before it is sent: page and manifest present, every audio file whole.

    Raises PacketError naming each missing, extra or altered file.
    """
    page, manifest_path = folder / "index.html", folder / "packet.json"
    missing = [p.name for p in (page, manifest_path) if not p.is_file()]
    if missing:
        raise PacketError(f"packet folder {folder} lacks {', '.join(missing)}; export the packet again")
    try:
        manifest = PacketManifest.model_validate_json(manifest_path.read_bytes())
    except ValidationError as exc:
        raise PacketError(f"{manifest_path} is not a valid packet manifest: {exc.error_count()} problem(s)") from exc
    found = {e.path: e.sha256 for e in build_manifest(folder).entries}
    problems = [f"missing {a.file}" for a in manifest.audio if a.file not in found]
    problems += [f"altered {a.file}" for a in manifest.audio if a.file in found and found[a.file] != a.sha256]
    problems += [f"unexpected {p}" for p in sorted(set(found) - {a.file for a in manifest.audio} - {"index.html", "packet.json"})]
    packet_sha = sha256_hex(manifest_path.read_bytes())
    if packet_sha not in page.read_text(encoding="utf-8"):
        problems.append(f"index.html is not bound to packet.json (digest {packet_sha[:12]} absent)")
    if problems:
        raise PacketError(f"packet folder {folder} (rater {manifest.rater_id}) is not intact: " + "; ".join(problems))
    return manifest


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number a submission can hold")


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def nesting_depth(data: bytes) -> int:
    """How deep arrays and objects nest in JSON text (brackets inside strings do not count).

    Counted without parsing, so a file nested 100,000 levels deep is measured, not recursed into.
    """
    bare = np.frombuffer(_JSON_STRING.sub(b"", data), dtype=np.uint8)
    steps = np.isin(bare, OPENERS).astype(np.int64) - np.isin(bare, CLOSERS).astype(np.int64)
    return int(np.cumsum(steps).max(initial=0))


OPENERS = np.frombuffer(b"[{", dtype=np.uint8)
CLOSERS = np.frombuffer(b"]}", dtype=np.uint8)


def parse_json(data: bytes) -> object:
    """Decode UTF-8 JSON (a leading byte order mark is allowed) into the values a submission can hold.

    PacketError for a file over ``MAX_SUBMISSION_BYTES``, nested deeper than ``MAX_JSON_DEPTH``,
    not UTF-8 JSON, with a key given twice in one object (which one counts differs between readers),
    with NaN, Infinity or an integer beyond +-2^53, with a key or string longer than ``MAX_JSON_TEXT``
    characters, or with a string that is not valid Unicode (a lone surrogate written as an escape).
    """
    if len(data) > MAX_SUBMISSION_BYTES:
        raise PacketError(f"file is {len(data)} bytes, more than the {MAX_SUBMISSION_BYTES} a submission can be")
    depth = nesting_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise PacketError(
            f"JSON nested {depth} levels deep; a submission nests at most {MAX_JSON_DEPTH}, so this file was not written by the page"
        )
    try:
        raw = json.loads(data.decode("utf-8-sig"), parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except DuplicateKeyError as exc:
        raise PacketError(str(exc)) from None
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise PacketError(f"not UTF-8 JSON ({str(exc)[:200]})") from exc
    bad = _bad_value(raw)
    if bad:
        raise PacketError(bad)
    return raw


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        if k in out:
            shown = k[:40] + ("..." if len(k) > 40 else "")
            raise DuplicateKeyError(f"duplicate key {shown!r} in one JSON object: a reader could take either value; export the file again")
        out[k] = v
    return out


def _bad_value(value: object) -> str | None:
    """The first number RFC 8785 cannot carry exactly, or string that is not Unicode, with its path; or None.

    Walks the document without recursion (its depth is bounded, but the caller's stack is not known).
    """
    todo: list[tuple[object, str]] = [(value, "$")]
    while todo:
        v, where = todo.pop()
        if isinstance(v, bool):
            continue
        if isinstance(v, int) and abs(v) > MAX_JSON_INTEGER or isinstance(v, float) and not math.isfinite(v):
            return f"number out of range at {where} ({v}): every number must be finite and integers within +-2^53; export the file again"
        if isinstance(v, str) and len(v) > MAX_JSON_TEXT:
            return f"text at {where} is {len(v)} characters; a submission's text holds at most {MAX_JSON_TEXT}; export the file again"
        if isinstance(v, str) and not _is_unicode(v):
            return f"text at {where} is not valid Unicode (a lone surrogate escape such as \\ud800); export the file again"
        if isinstance(v, dict):
            for k in v:
                if len(k) > MAX_JSON_TEXT:
                    return (
                        f"a key at {where} is {len(k)} characters; a submission's text holds at most {MAX_JSON_TEXT}; export the file again"
                    )
                if not _is_unicode(k):
                    return f"a key at {where} is not valid Unicode (a lone surrogate escape such as \\ud800); export the file again"
            todo.extend((x, f"{where}.{k}") for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            todo.extend((x, f"{where}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_submission(name: str, data: bytes, packets: dict[str, Packet], secret: bytes, checks: SubmissionChecks | None = None) -> Checked:
    """File-level checks, then row checks, then the log's plausibility under ``checks``.

    Raises PacketError with the reason for a refused file (never another exception for bad content).
    """
    checks = checks or SubmissionChecks()
    raw = parse_json(data)
    try:
        sub = Submission.model_validate(raw)
    except ValidationError as exc:
        fields = sorted({error_path(e) for e in exc.errors()})
        raise PacketError(f"not a voxledger submission: {len(fields)} invalid field(s): {', '.join(fields[:8])}") from exc
    packet = packets.get(sub.packet_sha256)
    if packet is None:
        raise PacketError(f"foreign: packet {sub.packet_sha256[:12]} is not part of this packet set")
    if sub.rater_id != packet.rater_id:
        raise PacketError(f"rater_id {sub.rater_id!r} does not match the packet's rater {packet.rater_id!r}")
    if not tokens_match(secret, sub.packet_sha256, sub.token):
        raise PacketError(f"forged: the token does not match packet {sub.packet_sha256[:12]} (not issued by this home)")
    if submission_mac(raw, sub.token) != sub.mac:  # type: ignore[arg-type]  # raw is the parsed JSON object
        raise PacketError("edited after export: the MAC over the submission does not match its content")
    times = [e.t_ms for e in sub.log]
    if any(b < a for a, b in pairwise(times)):
        raise PacketError("the presentation log is out of order (timestamps go backwards)")
    checked = Checked(name, data, sha256_hex(data), sub, packet)
    _check_rows(checked)
    if not checked.accepted:
        first = f" (first: {checked.rejected[0].reason})" if checked.rejected else ""
        raise PacketError(f"no valid rating rows: {len(checked.rejected)} row(s) refused{first}; nothing of this file can be used")
    heard = {s for r in checked.accepted for s in needed_samples(packet.trials[r.trial], r.stimulus)}
    checked.log_check = check_log(sub.log, packet.durations_s, heard, checks)
    if not checked.log_check.plausible and checks.on_implausible == "refuse":
        raise PacketError("implausible listening log: " + "; ".join(checked.log_check.flags))
    return checked


def needed_samples(trial: PacketTrial, stimulus: str) -> tuple[str, ...]:
    """The samples that must be played to the end before ``stimulus`` is rated in ``trial``.

    A/B: both samples; MUSHRA and SMOS: the open reference (what the sample is judged against) and the sample; ACR: the sample.
    """
    if trial.task == "ab":
        return trial.stimuli
    return (trial.reference, stimulus) if trial.task in ("mushra", "smos") and trial.reference else (stimulus,)


def _check_rows(c: Checked) -> None:
    log = c.submission.log
    seen: set[tuple[str, str, str]] = set()
    c.plays = sum(e.event == "play" for e in log)
    c.listening_s = _listening_s(log)
    for i, raw in enumerate(c.submission.ratings):
        try:
            row = SubmissionRating.model_validate(raw)
        except ValidationError as exc:
            c.rejected.append(RowRejection(index=i, reason=f"malformed row: {exc.error_count()} invalid field(s)"))
            continue
        reason = _row_problem(c.packet, row, seen, log)
        if reason:
            c.rejected.append(RowRejection(index=i, trial=row.trial, stimulus=row.stimulus, criterion=row.criterion, reason=reason))
        else:
            seen.add((row.trial, row.stimulus, row.criterion))
            c.accepted.append(row)


def _row_problem(packet: Packet, row: SubmissionRating, seen: set[tuple[str, str, str]], log: tuple) -> str | None:  # type: ignore[type-arg]
    trial = packet.trials.get(row.trial)
    if trial is None:
        return f"unknown trial {row.trial!r}: not in packet {packet.rater_id}"
    if row.stimulus not in rated_stimuli(trial):
        return f"stimulus {row.stimulus!r} is not rated in trial {row.trial}"
    if row.criterion not in trial.criteria:
        return f"criterion {row.criterion!r} was not asked in trial {row.trial}"
    scale = packet.scales[row.criterion]
    if not scale.contains(row.score):
        return f"score {row.score:g} is outside the scale [{scale.min}, {scale.max}] step {scale.step}"
    if (row.trial, row.stimulus, row.criterion) in seen:
        return "duplicate rating of the same trial, stimulus and criterion"
    before = [e for e in log if e.trial == row.trial and e.t_ms <= row.t_ms]
    if not any(e.event == "present" for e in before):
        return f"the log never presented trial {row.trial} before this rating"
    for stim in needed_samples(trial, row.stimulus):
        events = [e.event for e in before if e.stimulus == stim]
        if "ended" not in events or "play" not in events[: events.index("ended")]:
            return f"sample {stim} was not played to the end before the rating"
    rates = [
        e
        for e in log
        if e.event == "rate" and e.trial == row.trial and e.stimulus == row.stimulus and (e.detail or "").startswith(row.criterion + "=")
    ]
    if not rates or rates[-1].detail != f"{row.criterion}={row.score:g}":
        return f"score {row.score:g} differs from the last rating the log recorded ({rates[-1].detail if rates else 'none'})"
    return None


def _listening_s(log: tuple) -> float:  # type: ignore[type-arg]
    total, playing = 0, None
    for e in log:
        if e.event == "play":
            playing = e.t_ms
        elif e.event in ("ended", "pause") and playing is not None:
            total += e.t_ms - playing
            playing = None
    return round(total / 1000, 3)
