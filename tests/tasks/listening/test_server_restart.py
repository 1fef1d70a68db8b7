"""The server is SIGKILLed while three raters post events, and restarted: every acknowledged answer
is kept, each rater resumes where the journal says, nothing is recorded twice."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import oracle_scorer
from tests.tasks.listening.served_rater import ServedRater
from voxledger.stores.listening_sessions import SessionStore
from voxledger.tasks.listening.served import SERVED_DIR
from voxledger.tasks.listening.verify import rated_stimuli

REPO = Path(__file__).resolve().parents[3]
RATERS = ("r01", "r02", "r03")


def start_server(home: Path, packet_set: str, port: int = 0) -> tuple[subprocess.Popen[str], str, dict[str, str]]:
    """The serve script in a child process; (process, base URL, rater -> link path)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tests.tasks.listening.serve_script", str(home), packet_set, str(port)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url, links = proc.stdout.readline().strip(), {}
    while (line := proc.stdout.readline().strip()) != "ready":
        assert line, f"server exited ({proc.poll()}) before it was ready"
        rid, path = line.split()
        links[rid] = path
    return proc, url, links


def client(url: str) -> httpx.Client:
    """A client that sends small requests at once (as browsers do: without TCP_NODELAY a POST's body waits ~40 ms for an ACK)."""
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.Client(base_url=url, timeout=10, follow_redirects=True, transport=transport)


@dataclass
class Progress:
    done: int = 0
    error: str | None = None


def drive(rater: ServedRater, progress: Progress) -> None:
    """Rate every trial as fast as the server answers, until the connection breaks."""
    try:
        for trial in rater.manifest.trials[progress.done :]:
            rater.rate_trial(trial, {})
            progress.done += 1
    except (httpx.HTTPError, AssertionError) as exc:
        progress.error = type(exc).__name__


def test_sigkill_mid_session_keeps_every_answer_and_resumes(exported: Exported) -> None:
    t0 = time.monotonic()
    proc, url, links = start_server(exported.home.root, exported.receipt_id)
    port = int(url.rsplit(":", 1)[1])
    raters, progress = {}, {}
    try:
        for rid in RATERS:
            raters[rid] = ServedRater(client(url), links[rid], exported.key, oracle_scorer())
            raters[rid].ok("start")
            progress[rid] = Progress()
        threads = [threading.Thread(target=drive, args=(raters[rid], progress[rid])) for rid in RATERS]
        for t in threads:
            t.start()
        while min(p.done for p in progress.values()) < 1 and time.monotonic() - t0 < 60:
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)  # mid-session: each rater has finished at least one trial and is posting more
        proc.wait(timeout=10)
        for t in threads:
            t.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert all(p.error for p in progress.values()), "a rater finished before the kill: nothing was interrupted"
    acked = {rid: r.seq for rid, r in raters.items()}  # events the server acknowledged, per rater

    folder = exported.home.root / SERVED_DIR / exported.receipt_id[:16]
    store = SessionStore(folder / "sessions.sqlite")
    journal = {rid: ([e.seq for e in store.events(rid)], store.answers(rid)) for rid in RATERS}
    store.close()
    for rid, (seqs, answers) in journal.items():
        assert seqs == list(range(len(seqs))), f"{rid}: journal has gaps or duplicates"
        assert acked[rid] <= len(seqs) <= acked[rid] + 1, f"{rid}: {acked[rid]} acknowledged, {len(seqs)} journalled"
        cells = [(a.trial, a.stimulus, a.criterion) for a in answers]
        assert len(cells) == len(set(cells))
        trials = raters[rid].manifest.trials
        for trial in trials[: progress[rid].done]:  # every trial completed before the kill is kept whole
            assert all((trial.id, s, c) in cells for c in trial.criteria for s in rated_stimuli(trial)), f"{rid} lost {trial.id}"

    proc, url2, links2 = start_server(exported.home.root, exported.receipt_id, port)
    try:
        assert links2 == links  # the same links work after a restart
        for rid, r in raters.items():
            r.client.base_url = httpx.URL(url2)
            r.open("/t")  # a reload with the same cookie
            state = r.binding["state"]
            seqs, answers = journal[rid]
            assert state["seq"] == len(seqs) and state["started"] and not state["finished"]
            assert state["index"] >= progress[rid].done - 1 and len(state["ratings"]) == len(answers)
            # replaying the last event before the kill is refused; nothing is recorded twice
            replay = r.client.post("/api/events", json={"page": r.binding["page"], "seq": len(seqs) - 1, "event": "start"})
            assert replay.status_code == 409 and replay.json()["code"] == "replay"
            finish_from(r, state)
            assert r.finish().status_code == 200
        store = SessionStore(folder / "sessions.sqlite")
        for rid, r in raters.items():
            answers = store.answers(rid)
            expected = {(t.id, s, c) for t in r.manifest.trials for c in t.criteria for s in rated_stimuli(t)}
            assert sorted((a.trial, a.stimulus, a.criterion) for a in answers) == sorted(expected), rid
            before = {(a.trial, a.stimulus, a.criterion): a for a in journal[rid][1]}
            assert all(before[k] == a for a in answers if (k := (a.trial, a.stimulus, a.criterion)) in before), "an answer changed"
            assert [e.seq for e in store.events(rid)] == list(range(len(store.events(rid))))
        store.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert time.monotonic() - t0 < 60


def finish_from(r: ServedRater, state: dict[str, Any]) -> None:
    """Go on as the page does after a reload: the trial on screen first, then the rest."""
    trials = r.manifest.trials
    index = max(0, state["index"])
    given = {(x["trial"], x["stimulus"], x["criterion"]) for x in state["ratings"]}
    r.ok("start", None, None, "resumed")
    for trial in trials[index:]:
        if all((trial.id, s, c) in given for c in trial.criteria for s in rated_stimuli(trial)):
            r.ok("present", trial.id)
            r.ok("next", trial.id)
        else:
            r.rate_trial(trial, {})
