"""A packet set served to raters: links, the rules every event and answer follows, sealed submissions.

The server holds the key side of everything: the home's secret, each rater's token, the audio.
A rater's browser holds a cookie (given for the capability link) and the id of the page it shows;
every event it posts is numbered, timed here on arrival and checked against the rater's state
(the trial on screen, the samples played to the end) before it is journalled. When the last trial
is rated, the journal becomes a ``voxledger.submission/1`` file sealed with the rater's token, the
same file the static page exports, so ``voxledger ratings aggregate`` reads it unchanged. Files that
hold a token or a link secret (submissions, ``links.txt``) are written mode 0600.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from voxledger.schemas.errors import PacketError, RequestRefusedError, validation_lines
from voxledger.schemas.listening import ListeningProtocol, PacketTrial
from voxledger.schemas.listening_receipts import PacketSetReceipt
from voxledger.stores.home import Home
from voxledger.stores.listening_sessions import AnswerRow, EventRow, RaterRow, SessionStore
from voxledger.stores.trees import load_manifest
from voxledger.tasks.listening.keys import home_secret, keyed_hex, rater_token, submission_mac
from voxledger.tasks.listening.verify import Packet, load_packets, needed_samples, parse_json, rated_stimuli

SERVED_DIR = Path("listening") / "served"
LINKS_FILE = "links.txt"
MAX_BODY_BYTES = 4096  # an event is ~200 bytes
Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
PageId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Detail = Annotated[str, StringConstraints(max_length=120, pattern=r"^[\x20-\x7e]*$")]
ClientEvent = Literal["start", "present", "play", "pause", "seek", "ended", "rate", "ratechange", "blur", "focus", "next"]
ON_SCREEN = ("play", "pause", "seek", "ended", "ratechange", "rate", "next")  # events about the trial on screen
SCORE = re.compile(r"^([a-z][a-z0-9_]{0,39})=(-?[0-9]{1,4}(?:\.[0-9]{1,3})?)$")


class EventIn(BaseModel):
    """One event as a page posts it; the server adds the time."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    page: PageId
    seq: int = Field(ge=0, le=1_000_000)
    event: ClientEvent
    trial: Id | None = None
    stimulus: Id | None = None
    detail: Detail | None = None


class FinishIn(BaseModel):
    """The page's request to seal its answers once every trial is rated."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    page: PageId


def refuse(status: int, code: str, message: str) -> RequestRefusedError:
    """The error a refused request raises (the server answers it as JSON with this status)."""
    return RequestRefusedError(status, code, message)


def parse_body(data: bytes, model: type[EventIn] | type[FinishIn]) -> Any:
    """Validate a request body with the same refusals as file import (size, depth, NaN, Infinity, Unicode), then strictly."""
    if len(data) > MAX_BODY_BYTES:
        raise refuse(413, "too_large", f"request body is {len(data)} bytes; at most {MAX_BODY_BYTES} are accepted")
    try:
        raw = parse_json(data)
    except PacketError as exc:
        raise refuse(400, "invalid", f"request body: {exc}") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise refuse(400, "invalid", "request body: " + "; ".join(validation_lines(exc, limit=5))) from exc


@dataclass
class RaterState:
    """What the journal says about one rater, rebuilt from the events on start."""

    packet: Packet
    trial_ids: list[str]
    next_seq: int = 0
    last_t_ms: int = 0
    index: int = -1
    started: bool = False
    finished: bool = False
    playing: set[tuple[str, str]] = field(default_factory=set)
    ended: set[tuple[str, str]] = field(default_factory=set)
    answers: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def trial(self, trial_id: str) -> PacketTrial:
        t = self.packet.trials.get(trial_id)
        if t is None:
            raise refuse(400, "unknown_id", f"unknown trial {trial_id!r}: not in the packet of rater {self.packet.rater_id}")
        return t

    def complete(self, trial: PacketTrial) -> bool:
        return all((trial.id, s, c) in self.answers for c in trial.criteria for s in rated_stimuli(trial))

    def apply(self, e: EventRow) -> None:
        """Advance the state by one recorded event (the same code replays the journal on start)."""
        self.next_seq, self.last_t_ms = e.seq + 1, e.t_ms
        if e.event == "start":
            self.started = True
        elif e.event == "present" and e.trial is not None:
            self.index, self.playing = self.trial_ids.index(e.trial), set()
        elif e.event == "play" and e.trial and e.stimulus:
            self.playing = {(e.trial, e.stimulus)}
        elif e.event in ("pause", "ended") and e.trial and e.stimulus:
            self.playing.discard((e.trial, e.stimulus))
            if e.event == "ended":
                self.ended.add((e.trial, e.stimulus))
        elif e.event == "rate" and e.trial and e.stimulus and e.detail:
            crit, score = e.detail.split("=", 1)
            self.answers[(e.trial, e.stimulus, crit)] = float(score)
        elif e.event == "export":
            self.finished = True


def check_event(state: RaterState, ev: EventIn) -> AnswerRow | None:
    """Refuse an event the page could not have sent in this state; return the answer a ``rate`` gives.

    Raises RequestRefusedError: 400 for ids or fields that are wrong in any state, 409 for an
    event out of turn (a replayed or reordered sequence number, a rating before its samples were
    played to the end, a trial presented out of order).
    """
    rater = state.packet.rater_id
    if state.finished:
        raise refuse(409, "finished", f"rater {rater} has finished; nothing more is recorded")
    if ev.seq < state.next_seq:
        raise refuse(409, "replay", f"event {ev.seq} was already recorded (replay); the next expected is {state.next_seq}")
    if ev.seq > state.next_seq:
        raise refuse(409, "out_of_order", f"event {ev.seq} arrived before event {state.next_seq} (reordered or lost); send in order")
    if not state.started and ev.event != "start":
        raise refuse(409, "not_started", f"the first event of rater {rater} must be start, not {ev.event}")
    if ev.event in ("start", "blur", "focus"):
        if ev.stimulus is not None or (ev.trial is not None and ev.event == "start"):
            raise refuse(400, "invalid", f"a {ev.event} event names no stimulus")
        if ev.trial is not None:
            state.trial(ev.trial)
        return None
    if ev.trial is None:
        raise refuse(400, "invalid", f"a {ev.event} event must name its trial")
    trial = state.trial(ev.trial)
    position = state.trial_ids.index(trial.id)
    if ev.event == "present":
        current_done = state.index < 0 or state.complete(state.packet.manifest.trials[state.index])
        if not (position == state.index or (position == state.index + 1 and current_done)):
            raise refuse(409, "out_of_turn", f"trial {trial.id} cannot be presented now (trial {state.index + 1} is on screen, unrated)")
        return None
    if position != state.index:
        raise refuse(409, "out_of_turn", f"trial {trial.id} is not the trial on screen")
    if ev.event == "next":
        if not state.complete(trial):
            raise refuse(409, "incomplete", f"trial {trial.id} is not fully rated")
        return None
    samples = (*trial.stimuli, *((trial.reference,) if trial.reference else ()))
    if ev.stimulus is None or ev.stimulus not in samples:
        raise refuse(400, "unknown_id", f"unknown stimulus {ev.stimulus!r} in trial {trial.id}")
    if ev.event == "ended" and (trial.id, ev.stimulus) not in state.playing:
        raise refuse(409, "out_of_turn", f"ended for sample {ev.stimulus} of trial {trial.id} without a play of it")
    if ev.event != "rate":
        return None
    return _answer(state, trial, ev.stimulus, ev.detail)


def _answer(state: RaterState, trial: PacketTrial, stimulus: str, detail: str | None) -> AnswerRow:
    m = SCORE.match(detail or "")
    if stimulus not in rated_stimuli(trial) or m is None or m.group(1) not in trial.criteria:
        raise refuse(400, "invalid", f"rate event for {stimulus} in trial {trial.id}: detail must be CRITERION=SCORE for a rated sample")
    criterion, score = m.group(1), float(m.group(2))
    scale = state.packet.scales[criterion]
    if not scale.contains(score):
        raise refuse(400, "invalid", f"score {score:g} is outside the scale [{scale.min}, {scale.max}] step {scale.step}")
    unplayed = [s for s in needed_samples(trial, stimulus) if (trial.id, s) not in state.ended]
    if unplayed:
        raise refuse(409, "not_played", f"sample {unplayed[0]} of trial {trial.id} was not played to the end before this rating")
    return AnswerRow(trial.id, stimulus, criterion, score, 0)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Login:
    """A browser that opened a rater's link: the cookie to set (its sha256 is kept)."""

    rater_id: str
    cookie: str


class ServedSet:
    """One packet set being served: the journal, each rater's state, the audio by opaque id."""

    def __init__(self, home: Home, packet_set_id: str, receipt: PacketSetReceipt, clock: Any = time.time) -> None:
        self.home, self.packet_set_id, self.receipt, self._clock = home, packet_set_id, receipt, clock
        self.folder = home.root / SERVED_DIR / packet_set_id[:16]
        self.submissions_dir = self.folder / "submissions"
        self.submissions_dir.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.folder / "server.lock"))
        try:  # one server per set: two would journal the same raters from two diverging memories
            self._lock.acquire(timeout=0)
        except Timeout:
            raise PacketError(
                f"packet set {packet_set_id[:12]} is already being served from this home by another process; stop that one first"
            ) from None
        self._secret = home_secret(home)
        self.protocol = ListeningProtocol.model_validate_json(home.blobs.get_bytes(receipt.parameters.protocol_sha256))
        self.store = SessionStore(self.folder / "sessions.sqlite")
        packets = load_packets(home.blobs, receipt)
        self.states: dict[str, RaterState] = {}
        self.audio: dict[str, dict[str, str]] = {}  # rater -> opaque id -> audio blob sha256
        self.audio_url: dict[str, dict[str, str]] = {}  # rater -> pseudonym -> opaque id
        for packet in sorted(packets.values(), key=lambda p: p.rater_id):
            rid = packet.rater_id
            self.store.add_rater(rid, packet.packet_sha256, secrets.token_hex(16))
            files = {e.path: e.sha256 for e in load_manifest(home.blobs, packet.tree_sha256).entries}
            ids = {a.id: keyed_hex(self._secret, "served-audio", packet_set_id, rid, a.id)[:32] for a in packet.manifest.audio}
            self.audio_url[rid] = ids
            self.audio[rid] = {ids[a.id]: files[a.file] for a in packet.manifest.audio}
            state = RaterState(packet, [t.id for t in packet.manifest.trials])
            for e in self.store.events(rid):
                state.apply(e)
            self.states[rid] = state
        for r in self.store.raters():  # a submission a kill interrupted is written again, byte for byte
            if self.states[r.rater_id].finished:
                self._write_submission(r.rater_id)

    def close(self) -> None:
        """Close the journal and let another process serve the set."""
        self.store.close()
        self._lock.release()

    # ---- links and sessions ----
    def issue_links(self, raters: list[str] | None = None) -> dict[str, str]:
        """New links (paths ``/r/<id>/<secret>``) for ``raters``, or for every rater without a usable one.

        The secret is written to ``links.txt`` (mode 0600) and returned, never journalled.
        """
        rows = self.store.raters()
        chosen = raters if raters is not None else [r.rater_id for r in rows if r.link_id is None or r.revoked]
        unknown = [r for r in chosen if r not in self.states]
        if unknown:
            raise PacketError(f"rater {unknown[0]!r} is not in packet set {self.packet_set_id[:12]}; raters: {', '.join(self.states)}")
        return issue_links(self.store, self.links_file, chosen)

    @property
    def links_file(self) -> Path:
        return self.folder / LINKS_FILE

    def links(self) -> dict[str, str]:
        """The current link path of every rater whose link is usable (from ``links.txt``)."""
        return read_links(self.store, self.links_file)

    def login(self, link_id: str, secret: str, user_agent: str) -> Login:
        """The rater a link names, checked in constant time; a fresh cookie replaces any earlier browser's."""
        row = self.store.by_link(link_id)
        if row is None or row.link_sha256 is None:
            raise refuse(404, "unknown_link", "unknown link: ask the organiser for yours")
        if not hmac.compare_digest(_sha(secret), row.link_sha256):
            raise refuse(403, "bad_link", "this link is not valid: ask the organiser for yours")
        if row.revoked:
            raise refuse(403, "revoked", "this link was revoked: ask the organiser for a new one")
        cookie = secrets.token_urlsafe(32)
        self.store.set_cookie(row.rater_id, _sha(cookie), row.user_agent or user_agent[:200])
        return Login(row.rater_id, cookie)

    def rater_for(self, cookie: str | None) -> RaterRow:
        """The rater a cookie belongs to (constant-time check), or a 403."""
        if not cookie or len(cookie) > 100:
            raise refuse(403, "no_session", "no session: open the link the organiser sent you")
        digest = _sha(cookie)
        row = self.store.by_cookie(digest)
        if row is None or row.cookie_sha256 is None or not hmac.compare_digest(digest, row.cookie_sha256) or row.revoked:
            raise refuse(403, "no_session", "this session has ended (revoked, or the link was opened elsewhere): open your link again")
        return row

    def open_page(self, rater_id: str) -> str:
        """A new page id for the rater; posts from any earlier page are refused from now on."""
        page = secrets.token_hex(16)
        self.store.set_page(rater_id, page)
        return page

    # ---- events ----
    def record(self, row: RaterRow, ev: EventIn) -> int:
        """Check and journal one event at the server's time; returns the next expected sequence number."""
        if row.page is None or not hmac.compare_digest(row.page, ev.page):
            raise refuse(409, "other_page", "this page is no longer the rater's open page (opened again elsewhere): reload it")
        state = self.states[row.rater_id]
        answer = check_event(state, ev)
        now_ms = int(self._clock() * 1000)
        started = row.started_epoch_ms if row.started_epoch_ms is not None else now_ms
        t_ms = max(state.last_t_ms, now_ms - started)  # the server's clock, never backwards (not even across a restart)
        detail = ev.detail
        if answer is not None:  # recorded as the file route's rows are checked: CRITERION=SCORE with SCORE in %g form
            answer = AnswerRow(answer.trial, answer.stimulus, answer.criterion, answer.score, t_ms)
            detail = f"{answer.criterion}={answer.score:g}"
        event = EventRow(ev.seq, t_ms, ev.event, ev.trial, ev.stimulus, detail)
        self.store.record_event(row.rater_id, event, answer, now_ms if row.started_epoch_ms is None else None)
        state.apply(event)
        return state.next_seq

    def finish(self, row: RaterRow, page: str) -> Path:
        """Seal the rater's answers into a submission in the home (idempotent once written)."""
        if row.page is None or not hmac.compare_digest(row.page, page):
            raise refuse(409, "other_page", "this page is no longer the rater's open page (opened again elsewhere): reload it")
        state = self.states[row.rater_id]
        if not state.finished:
            todo = [t.id for t in state.packet.manifest.trials if not state.complete(t)]
            if todo:
                raise refuse(409, "incomplete", f"not finished: {len(todo)} trial(s) still unrated (first {todo[0]})")
            now_ms = int(self._clock() * 1000)
            t_ms = max(state.last_t_ms, now_ms - (row.started_epoch_ms or now_ms))
            event = EventRow(state.next_seq, t_ms, "export", None, None, None)
            self.store.record_event(row.rater_id, event, None, None)
            state.apply(event)
        return self._write_submission(row.rater_id)

    def submission(self, rater_id: str) -> dict[str, Any]:
        """The rater's submission document, a pure function of the journal (so it can be written again)."""
        row, state = self.store.rater(rater_id), self.states[rater_id]
        if row is None or row.started_epoch_ms is None:
            raise PacketError(f"rater {rater_id} has no recorded session")
        events = self.store.events(rater_id)
        token = rater_token(self._secret, state.packet.packet_sha256)
        doc: dict[str, Any] = {
            "format": "voxledger.submission/1",
            "packet_sha256": state.packet.packet_sha256,
            "rater_id": rater_id,
            "token": token,
            "session_id": row.session_id,
            "user_agent": row.user_agent,
            "started_at": _iso(row.started_epoch_ms),
            "finished_at": _iso(row.started_epoch_ms + events[-1].t_ms),
            "ratings": [
                {"trial": a.trial, "stimulus": a.stimulus, "criterion": a.criterion, "score": _number(a.score), "t_ms": a.t_ms}
                for a in self.store.answers(rater_id)
            ],
            "log": [{"t_ms": e.t_ms, "event": e.event, "trial": e.trial, "stimulus": e.stimulus, "detail": e.detail} for e in events],
        }
        doc["mac"] = submission_mac(doc, token)
        return doc

    def submission_path(self, rater_id: str) -> Path:
        return self.submissions_dir / f"{rater_id}.json"

    def _write_submission(self, rater_id: str) -> Path:
        data = json.dumps(self.submission(rater_id), indent=1).encode("utf-8")
        path = self.submission_path(rater_id)
        if path.is_file() and path.read_bytes() == data:
            os.chmod(path, 0o600)  # a file an older version wrote readable by all holds the packet's token
            return path
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)  # a kill's leftover; O_EXCL below then creates it 0600 whatever the umask
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.store.finish(rater_id, _iso(int(self._clock() * 1000)), hashlib.sha256(data).hexdigest())
        return path

    def finished_submissions(self) -> list[Path]:
        """The submission files of every finished rater, by rater id."""
        return [self.submission_path(r) for r, s in sorted(self.states.items()) if s.finished]

    # ---- what the page gets ----
    def page_document(self, rater_id: str) -> dict[str, Any]:
        """The packet as the served page shows it: audio by opaque URL, no file names, no digests."""
        manifest = self.states[rater_id].packet.manifest.model_dump(mode="json")
        urls = self.audio_url[rater_id]
        manifest["audio"] = [{"id": a["id"], "file": f"/a/{urls[a['id']]}"} for a in manifest["audio"]]
        return manifest

    def resume_state(self, rater_id: str) -> dict[str, Any]:
        """Where the rater is: the next sequence number, the trial on screen, answers and samples heard."""
        s = self.states[rater_id]
        return {
            "seq": s.next_seq,
            "index": s.index,
            "started": s.started,
            "finished": s.finished,
            "ratings": [{"trial": t, "stimulus": st, "criterion": c, "score": _number(v)} for (t, st, c), v in s.answers.items()],
            "ended": sorted(f"{t}|{st}" for t, st in s.ended),
        }

    def audio_sha256(self, rater_id: str, opaque: str) -> str:
        """The blob behind one of the rater's audio ids; a 404 for any other id (another rater's included)."""
        sha = self.audio[rater_id].get(opaque)
        if sha is None:
            raise refuse(404, "not_found", "not found")
        return sha


def _number(score: float) -> int | float:
    return int(score) if float(score).is_integer() else score


def revoke_link(home: Home, packet_set_id: str, rater_id: str, *, new_link: bool = False) -> str | None:
    """Revoke a rater's link to a served set (and issue a new one); the journal is all a running server reads.

    Raises PacketError when the set was never served or the rater is not in it.
    """
    folder = check_revocable(home, packet_set_id, rater_id)
    store = SessionStore(folder / "sessions.sqlite")
    try:
        if not store.revoke(rater_id):
            known = ", ".join(r.rater_id for r in store.raters())
            raise PacketError(f"rater {rater_id!r} is not in packet set {packet_set_id[:12]}; raters: {known}")
        return issue_links(store, folder / LINKS_FILE, [rater_id])[rater_id] if new_link else None
    finally:
        store.close()


def check_revocable(home: Home, packet_set_id: str, rater_id: str) -> Path:
    """The served set's folder when ``rater_id`` is one of its raters; PacketError naming the problem
    otherwise (checked before any flow starts, so bad input costs no run)."""
    folder = home.root / SERVED_DIR / packet_set_id[:16]
    if not (folder / "sessions.sqlite").is_file():
        raise PacketError(f"packet set {packet_set_id[:12]} was never served from this home; nothing to revoke")
    store = SessionStore(folder / "sessions.sqlite")
    try:
        known = [r.rater_id for r in store.raters()]
    finally:
        store.close()
    if rater_id not in known:
        raise PacketError(f"rater {rater_id!r} is not in packet set {packet_set_id[:12]}; raters: {', '.join(known)}")
    return folder


def issue_links(store: SessionStore, links_file: Path, raters: list[str]) -> dict[str, str]:
    """New links (paths ``/r/<id>/<secret>``) for ``raters``; the journal keeps only each secret's sha256.

    The paths are written to ``links_file`` (mode 0600) beside every other usable link.
    """
    issued = {}
    for rid in raters:
        link_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        store.set_link(rid, link_id, _sha(secret))
        issued[rid] = f"/r/{link_id}/{secret}"
    if issued:
        lines = {**read_links(store, links_file), **issued}
        tmp = links_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(f"{rid}\t{path}\n" for rid, path in sorted(lines.items())))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, links_file)
    return issued


def read_links(store: SessionStore, links_file: Path) -> dict[str, str]:
    """The link path of every rater whose link is usable (not revoked, not replaced), from ``links_file``."""
    usable = {r.rater_id: r.link_id for r in store.raters() if r.link_id and not r.revoked}
    out = {}
    if links_file.is_file():
        for line in links_file.read_text(encoding="utf-8").splitlines():
            rid, _, path = line.partition("\t")
            if rid in usable and path.startswith(f"/r/{usable[rid]}/"):
                out[rid] = path
    return out
