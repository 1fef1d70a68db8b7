"""The listening-test server in process (Starlette's test client, the server's clock moved by the test).

Served raters aggregate exactly as the same answers given as files; every refused request says
why and writes nothing; audio is served by opaque id with uniform headers and byte ranges; the
leak check passes on the bytes and headers the server actually sends.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from starlette.testclient import TestClient

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import oracle_scorer, read_binding, simulate_submission, write_json
from tests.tasks.listening.served_rater import Clock, ServedRater, page_parts
from voxledger.schemas.errors import PacketError
from voxledger.stores.home import Home
from voxledger.tasks.listening.keys import home_secret, rater_token, sealed_dir
from voxledger.tasks.listening.leakcheck import PacketFile, check_leaks
from voxledger.tasks.listening.served import ServedSet, revoke_link
from voxledger.tasks.listening.server import COOKIE, Limits, ServerApp
from voxledger.tasks.stages.ratings import aggregate_ratings


@dataclass
class Serving:
    exported: Exported
    served: ServedSet
    server: ServerApp
    links: dict[str, str]
    clock: Clock

    def client(self, port: int = 40000) -> TestClient:
        return TestClient(self.server.app, base_url="http://127.0.0.1:8765", client=("127.0.0.1", port))

    def rater(self, rid: str, port: int = 40000) -> ServedRater:
        return ServedRater(self.client(port), self.links[rid], self.exported.key, oracle_scorer(), self.clock)

    def durations(self, rid: str) -> dict[str, float]:
        return self.served.states[rid].packet.durations_s

    def journal(self) -> tuple[Any, ...]:
        """Everything a refused request must leave as it was."""
        store = self.served.store
        files = sorted(
            (p.relative_to(self.served.folder).as_posix(), p.stat().st_size)
            for p in self.served.folder.rglob("*")
            if "sqlite" not in p.name
        )
        return (store.counts(), [(r.rater_id, store.events(r.rater_id), store.answers(r.rater_id)) for r in store.raters()], files)


def _aggregate(home: Home, rid: str) -> Any:
    def run(files: list[Path]) -> dict[str, Any]:
        out = aggregate_ratings(home, rid, files, flow="test")
        return {"receipt": out.receipt_id, "accepted": out.receipt.result.submissions_accepted,
                "screening": [s.model_dump(mode="json") for s in out.receipt.result.screening]}  # fmt: skip

    return run


@pytest.fixture
def serving(exported: Exported, tmp_path: Path) -> Iterator[Serving]:
    shutil.copytree(exported.home.root, tmp_path / "home-before-serving")  # the file route's twin of this home
    clock = Clock()
    served = ServedSet(exported.home, exported.receipt_id, exported.receipt, clock=clock)
    links = served.issue_links()
    server = ServerApp(served, aggregate=_aggregate(exported.home, exported.receipt_id), limits=Limits(rater_burst=10_000))
    yield Serving(exported, served, server, links, clock)
    server.aggregator.stop()
    served.close()


def _results_equal(a: Any, b: Any) -> None:
    for name in ("scores", "screening", "deltas", "bradley_terry", "agreement", "screening_scores", "rating_rows", "attrition"):
        assert getattr(a, name) == getattr(b, name), name


def test_served_raters_aggregate_as_their_answers_do_as_files(serving: Serving, tmp_path: Path) -> None:
    raters = ["r01", "r02"]
    for i, rid in enumerate(raters):
        r = serving.rater(rid, 40000 + i)
        r.ok("start")
        for trial in r.manifest.trials:
            r.rate_trial(trial, serving.durations(rid))
        assert r.finish().status_code == 200
    assert serving.server.aggregator.wait_idle(120)
    served_agg = serving.server.aggregator.last
    assert served_agg["accepted"] == 2, served_agg
    home = serving.exported.home
    files = serving.served.finished_submissions()
    assert [f.name for f in files] == ["r01.json", "r02.json"]
    # `voxledger ratings aggregate` on the served files, unchanged: the same aggregate (reused)
    again = aggregate_ratings(home, serving.exported.receipt_id, files)
    assert again.receipt_id == served_agg["receipt"] and again.cached

    # the same answers as files the static page exports, aggregated in the home as it was before serving
    twin = Home(tmp_path / "home-before-serving")
    packets = serving.exported.packets
    paths = [write_json(tmp_path / f"{rid}.json", simulate_submission(packets / rid, serving.exported.key, oracle_scorer(), session=f"{i + 1:032x}"))
             for i, rid in enumerate(raters)]  # fmt: skip
    by_file = aggregate_ratings(twin, serving.exported.receipt_id, paths).receipt.result
    _results_equal(again.receipt.result, by_file)
    assert again.receipt.result.submissions_accepted == 2 and not again.receipt.result.rejections
    subs = [json.loads(f.read_text()) for f in files]
    assert all(s["token"] == rater_token(home_secret(home), s["packet_sha256"]) for s in subs)
    assert all("t_ms" in e for s in subs for e in s["log"]) and [e["event"] for e in subs[0]["log"]][-1] == "export"
    status = serving.server.status()
    assert [(r["rater_id"], r["finished"], r["log_plausible"], r["screening"]["included"]) for r in status["raters"][:2]] == [
        ("r01", True, True, True),
        ("r02", True, True, True),
    ]


def test_a_log_faster_than_the_audio_is_flagged_by_the_servers_clock(serving: Serving) -> None:
    r = serving.rater("r03")
    r.ok("start")
    trial = r.manifest.trials[0]
    r.rate_trial(trial, {s: 0.0 for s in serving.durations("r03")})  # ended arrives at once: no real-time listening
    row = next(x for x in serving.server.status()["raters"] if x["rater_id"] == "r03")
    assert not row["log_plausible"] and row["log_flags"][0].startswith("play_time:"), row


def _raw(client: TestClient, body: bytes, content_type: str = "application/json") -> Any:
    return client.post("/api/events", content=body, headers={"Content-Type": content_type})


def test_refused_requests_say_why_and_write_nothing(serving: Serving) -> None:
    a, b = serving.rater("r01", 40001), serving.rater("r02", 40002)
    a.ok("start")
    trial = a.manifest.trials[0]
    a.ok("present", trial.id)
    page = a.binding["page"]
    before = serving.journal()

    def refused(response: Any, status: int, code: str, text: str) -> None:
        assert response.status_code == status, (response.status_code, response.text)
        body = response.json()
        assert body["code"] == code and text in body["error"], body
        assert serving.journal() == before, f"{code}: the journal changed"

    stim = trial.stimuli[0]
    crit = trial.criteria[0]
    refused(a.post("rate", trial.id, stim, f"{crit}=3"), 409, "not_played", "was not played to the end")
    refused(a.post("ended", trial.id, stim), 409, "out_of_turn", "without a play")
    # another rater's page (the session cookie is a's), another rater's secret in a's link
    good = {"page": b.binding["page"], "seq": a.seq, "event": "play", "trial": trial.id, "stimulus": stim, "detail": None}
    refused(a.client.post("/api/events", json=good), 409, "other_page", "no longer the rater's open page")
    link_a, link_b = serving.links["r01"].split("/"), serving.links["r02"].split("/")
    refused(serving.client(40009).get(f"/r/{link_a[2]}/{link_b[3]}", follow_redirects=False), 403, "bad_link", "not valid")
    refused(serving.client(40009).get("/r/0000000000000000/nothing", follow_redirects=False), 404, "unknown_link", "unknown link")
    # replayed and reordered sequence numbers
    body = {"page": page, "seq": a.seq - 1, "event": "play", "trial": trial.id, "stimulus": stim, "detail": None}
    refused(a.client.post("/api/events", json=body), 409, "replay", "already recorded")
    refused(a.client.post("/api/events", json={**body, "seq": a.seq + 1}), 409, "out_of_order", "arrived before")
    # strict fields: NaN, Infinity, huge numbers, path-like and unknown ids, oversized bodies, wrong types
    ok = json.dumps({**body, "seq": a.seq})
    refused(_raw(a.client, ok.replace(f'"seq": {a.seq}', '"seq": NaN').encode()), 400, "invalid", "NaN is not a JSON number")
    refused(_raw(a.client, ok.replace(f'"seq": {a.seq}', '"seq": -Infinity').encode()), 400, "invalid", "-Infinity is not a JSON number")
    refused(_raw(a.client, ok.replace(f'"seq": {a.seq}', '"seq": 1e999').encode()), 400, "invalid", "number out of range")
    refused(_raw(a.client, ok.replace(f'"seq": {a.seq}', f'"seq": "{a.seq}"').encode()), 400, "invalid", "seq")
    refused(a.post("play", "../../sealed/listening-hmac.key", stim), 400, "invalid", "trial")
    refused(a.post("play", trial.id, "audio/" + stim + ".wav"), 400, "invalid", "stimulus")
    refused(a.post("play", "t999", stim), 400, "unknown_id", "unknown trial 't999'")
    refused(a.post("play", trial.id, "s0000000000000000"), 400, "unknown_id", "unknown stimulus")
    refused(a.post("export"), 400, "invalid", "event")
    refused(_raw(a.client, ok[:-1].encode() + b', "extra": "' + b"x" * 5000 + b'"}'), 413, "too_large", "at most")
    refused(_raw(a.client, ok.encode(), "text/plain"), 415, "invalid", "application/json")
    cross = a.client.post("/api/events", content=ok, headers={"Content-Type": "application/json", "Origin": "https://evil.example"})
    refused(cross, 403, "cross_origin", "not accepted")
    refused(a.client.post("/api/finish", json={"page": page}), 409, "incomplete", "still unrated")
    # nothing else answers, and no request path reaches the file system
    for path in ("/", "/a/", "/a/..%2F..%2Fsealed%2Flistening-hmac.key", "/../sealed/listening-hmac.key", "/static/page.js", "/r/"):
        assert a.client.get(path).status_code == 404, path
    refused(a.client.get(f"/a/{b.audio[b.manifest.trials[0].stimuli[0]].split('/')[-1]}"), 404, "not_found", "not found")
    # a revoked link and its session are refused at once
    revoke_link(serving.exported.home, serving.exported.receipt_id, "r01")
    refused(a.post("play", trial.id, stim), 403, "no_session", "open your link again")
    refused(serving.client(40010).get(serving.links["r01"], follow_redirects=False), 403, "revoked", "revoked")
    assert serving.server.status()["refused"]["not_played"] == 1
    # a fresh link for the same rater works and resumes at the trial on screen
    new = revoke_link(serving.exported.home, serving.exported.receipt_id, "r01", new_link=True)
    assert new is not None
    again = ServedRater(serving.client(40011), new, serving.exported.key, oracle_scorer(), serving.clock)
    assert again.binding["state"]["index"] == 0 and again.binding["state"]["seq"] == a.seq


def test_audio_by_opaque_id_with_uniform_headers_and_ranges(serving: Serving) -> None:
    r = serving.rater("r01")
    assert COOKIE in r.client.cookies and r.binding.keys() == {"served", "page", "state"}
    packet_dir = serving.exported.packets / "r01"
    seen = []
    for sid, url in r.audio.items():
        assert url.startswith("/a/") and sid not in url and len(url) == 3 + 32
        whole = r.client.get(url)
        assert whole.status_code == 200 and whole.content == (packet_dir / "audio" / f"{sid}.wav").read_bytes()
        seen.append({k: v for k, v in whole.headers.items() if k not in ("content-length", "date")})
        part = r.client.get(url, headers={"Range": "bytes=10-19"})
        assert part.status_code == 206 and part.content == whole.content[10:20]
        assert part.headers["content-range"] == f"bytes 10-19/{len(whole.content)}"
        assert r.client.get(url, headers={"Range": "bytes=-4"}).content == whole.content[-4:]
        assert r.client.get(url, headers={"Range": f"bytes={len(whole.content)}-"}).status_code == 416
        head = r.client.head(url)
        assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(whole.content))
    assert all(h == seen[0] for h in seen), "audio responses differ in more than their length"
    assert seen[0] == {
        "content-type": "audio/wav", "accept-ranges": "bytes", "cache-control": "no-store", "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer", "x-frame-options": "DENY", "cross-origin-resource-policy": "same-origin",
    }  # fmt: skip
    assert serving.client(40003).get(next(iter(r.audio.values()))).status_code == 403  # no cookie, no audio


def test_leak_check_passes_on_what_the_server_sends(serving: Serving) -> None:
    exported, p = serving.exported, serving.exported.receipt.parameters
    key = exported.key
    secret = home_secret(exported.home)
    tokens = ["recordings", "sys_a", "sys_b", "low_anchor", "gold", "attention", "prompt_id", "birch canoe", p.key_commitment_sha256]
    tokens += [e.audio_sha256 for e in key.values()] + [secret.hex(), *(f.read_text() for f in sealed_dir(exported.home).glob("*.json"))]
    tokens += [rater_token(secret, ref.packet_sha256) for ref in p.packets] + [path.split("/")[-1] for path in serving.links.values()]
    files = []
    for i, ref in enumerate(p.packets):
        r = serving.rater(ref.rater_id, 41000 + i)
        assert not [t for t in tokens if t in r.html], f"page of {ref.rater_id} reveals a secret or a label"
        assert read_binding(exported.packets / ref.rater_id / "index.html")["token"] not in r.html
        for sid, url in r.audio.items():
            resp = r.client.get(url)
            head = "".join(f"{k}: {v}\n" for k, v in resp.headers.items())
            data = resp.content
            start = data.index(b"data") + 8
            around = data[:start] + data[start + int.from_bytes(data[start - 4 : start], "little") :]
            found = [t for t in tokens if t in head or t.encode() in around or (len(t) >= 8 and t.encode() in data)]
            assert not found, f"{url} reveals {found}"
            pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
            e = key[sid]
            trial = next(t.id for t in r.manifest.trials if sid in t.stimuli or sid == t.reference)
            task = next(t.task for t in r.manifest.trials if t.id == trial)
            source = f"{e.audio_sha256}:{e.candidate}"  # the key's source blob; an anchor or scrambled copy is named apart
            files.append(PacketFile(ref.rater_id, sid, trial, task, e.role, e.candidate, e.prompt_id, np.asarray(pcm), source))
    assert len(files) == len(p.leak_check.features)  # type: ignore[union-attr]
    leak = check_leaks(files, rate, serving.served.protocol.blinding)
    assert leak.passed and not leak.leaks
    assert leak.worst == p.leak_check.worst  # type: ignore[union-attr]  # the same bytes the export measured


def test_serve_and_revoke_refuse_bad_input_in_one_line(exported: Exported) -> None:
    from click.testing import CliRunner

    from voxledger.cli import main

    home = str(exported.home.root)
    plan = next(i.sha256 for i in exported.receipt.inputs if i.role == "protocol")
    cases = [
        (["packets", "serve", "/tmp/none"], 1, "is not a sha256 digest or prefix"),
        (["packets", "serve", plan[:12]], 1, "not packet_set"),
        (["packets", "serve", exported.receipt_id[:12], "--public-url", "ftp://x"], 2, "is not an http(s) address"),
        (["packets", "revoke", exported.receipt_id[:12], "r01"], 1, "was never served from this home"),
    ]
    for args, code, fragment in cases:
        result = CliRunner().invoke(main, ["--home", home, *args])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == code and fragment in result.output, (args, result.exit_code, result.output)
        assert "Traceback" not in result.output and "No such command" not in result.output
        assert code == 2 or len(lines) == 1, (args, result.output)
    served = ServedSet(exported.home, exported.receipt_id, exported.receipt)
    with pytest.raises(PacketError, match="already being served from this home by another process"):
        ServedSet(exported.home, exported.receipt_id, exported.receipt)
    served.close()
    result = CliRunner().invoke(main, ["--home", home, "packets", "revoke", exported.receipt_id[:12], "r99"])
    assert result.exit_code == 1 and "rater 'r99' is not in packet set" in result.output and len(result.output.splitlines()) == 1


def test_rate_limits_refuse_bursts_and_write_nothing(serving: Serving) -> None:
    tight = ServerApp(serving.served, limits=Limits(rater_burst=4, rater_per_s=0.01, anonymous_burst=3, anonymous_per_s=0.01))
    c = TestClient(tight.app, base_url="http://127.0.0.1:8765", client=("127.0.0.1", 42000))
    assert c.get(serving.links["r04"]).status_code == 200  # the link (anonymous bucket) and the page (rater bucket)
    page = c.get("/t")
    assert page.status_code == 200
    _, binding_doc = page_parts(page.text)
    seq = binding_doc["state"]["seq"]
    codes = [c.post("/api/events", json={"page": binding_doc["page"], "seq": seq + i, "event": "start"}).status_code for i in range(4)]
    assert codes == [200, 200, 429, 429], codes
    limited = c.post("/api/events", json={"page": binding_doc["page"], "seq": seq + 2, "event": "start"})
    assert limited.json()["code"] == "rate_limited" and limited.headers["retry-after"] == "1"
    assert len(serving.served.store.events("r04")) == seq + 2
    strangers = [
        TestClient(tight.app, client=("192.0.2.7", 1)).get("/r/0000000000000000/x", follow_redirects=False).status_code for _ in range(5)
    ]
    assert strangers == [404, 404, 404, 429, 429]
    tight.aggregator.stop()
