"""Request and file limits of the collection server and the file route (issue 61, item 4).

A request head over the documented 16 KiB is refused by the running server (uvicorn), not only in
process; a served submission holds the packet's token, so it is written 0600 like ``links.txt``;
JSON naming a key twice is refused naming the key (readers disagree on which value counts); an
oversized string (a 19 MB user agent) is refused in one line naming the field and the bound.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import oracle_scorer, simulate_submission, write_json
from tests.tasks.listening.served_rater import Clock, ServedRater
from tests.tasks.listening.test_server_restart import client, start_server
from voxledger.cli import main
from voxledger.tasks.listening.keys import submission_mac
from voxledger.tasks.listening.served import ServedSet
from voxledger.tasks.listening.server import MAX_HEADER_BYTES, ServerApp
from voxledger.tasks.listening.verify import MAX_JSON_TEXT
from voxledger.tasks.stages.ratings import aggregate_ratings


def test_a_request_head_over_16_kib_is_refused_by_the_running_server(exported: Exported) -> None:
    proc, url, _links = start_server(exported.home.root, exported.receipt_id)
    try:
        with client(url) as http:
            for kib in (17, 32, 60):
                r = http.get("/t", headers={"X-Pad": "a" * (kib * 1024)})
                assert r.status_code == 431, (kib, r.status_code, r.text[:200])
                assert r.json()["code"] == "too_large" and f"at most {MAX_HEADER_BYTES}" in r.json()["error"]
                assert r.headers["X-Content-Type-Options"] == "nosniff"
            small = http.get("/t", headers={"X-Pad": "a" * (15 * 1024)})  # under the cap: answered as any request without a session
            assert small.status_code == 403 and small.json()["code"] == "no_session"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_served_submission_files_are_readable_by_the_owner_only(exported: Exported) -> None:
    clock = Clock()
    served = ServedSet(exported.home, exported.receipt_id, exported.receipt, clock=clock)
    try:
        links = served.issue_links()
        app = ServerApp(served)
        http = TestClient(app.app, base_url="http://127.0.0.1:8765", client=("127.0.0.1", 40000))
        rater = ServedRater(http, links["r01"], exported.key, oracle_scorer(), clock)
        rater.ok("start")
        for trial in rater.manifest.trials:
            rater.rate_trial(trial, served.states["r01"].packet.durations_s)
        assert rater.finish().status_code == 200
        path = served.submission_path("r01")
        assert json.loads(path.read_bytes())["token"]  # what the mode protects
        assert path.stat().st_mode & 0o777 == 0o600 and served.links_file.stat().st_mode & 0o777 == 0o600
        path.chmod(0o644)  # as an earlier version left it: sealing again (a restart) tightens it
        served.finish(served.store.rater("r01"), served.store.rater("r01").page)  # type: ignore[union-attr, arg-type]
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        served.close()


def test_json_naming_a_key_twice_is_refused_naming_the_key(exported: Exported, tmp_path: Path) -> None:
    clock = Clock()
    served = ServedSet(exported.home, exported.receipt_id, exported.receipt, clock=clock)
    try:
        app = ServerApp(served)
        http = TestClient(app.app, base_url="http://127.0.0.1:8765", client=("127.0.0.1", 40000))
        rater = ServedRater(http, served.issue_links()["r01"], exported.key, oracle_scorer(), clock)
        body = f'{{"page": "{rater.binding["page"]}", "seq": 0, "event": "start", "seq": 0}}'
        r = http.post("/api/events", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "duplicate key 'seq'" in r.json()["error"], r.text
        assert served.store.counts().get("r01", (0, 0))[0] == 0
    finally:
        served.close()
    doc = simulate_submission(exported.packets / "r02", exported.key, oracle_scorer(), session="2" * 32)
    text = json.dumps(doc, indent=1)
    twice = text.replace('"rater_id": "r02",', '"rater_id": "r02",\n "rater_id": "r05",', 1).encode()
    (tmp_path / "twice.json").write_bytes(twice)
    good = write_json(
        tmp_path / "good.json", simulate_submission(exported.packets / "r06", exported.key, oracle_scorer(), session="6" * 32)
    )
    res = aggregate_ratings(exported.home, exported.receipt_id, [good, tmp_path / "twice.json"]).receipt.result
    assert [(r.file, r.reason) for r in res.rejections] == [
        ("twice.json", "duplicate key 'rater_id' in one JSON object: a reader could take either value; export the file again")
    ]


@pytest.mark.prefect
def test_an_oversized_user_agent_is_refused_in_one_line(exported: Exported, tmp_path: Path) -> None:
    doc = simulate_submission(exported.packets / "r03", exported.key, oracle_scorer(), session="3" * 32)
    doc["user_agent"] = "M" * 19_000_000
    doc["mac"] = submission_mac(doc, doc["token"])  # sealed as a page would: only the size is wrong
    big = write_json(tmp_path / "big.json", doc)
    res = CliRunner().invoke(main, ["--home", str(exported.home.root), "ratings", "aggregate", exported.receipt_id, str(big)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert f"big.json: text at $.user_agent is 19000000 characters; a submission's text holds at most {MAX_JSON_TEXT}" in res.output
    assert len(res.output) < 2000, len(res.output)  # the value itself is never echoed
