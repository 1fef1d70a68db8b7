"""Three raters in three headless Chromiums take a served packet set at once; the server's aggregate of
their sessions equals the aggregate of the same answers given as files."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.tasks.listening.cdp import CHROMIUM, Chromium
from tests.tasks.listening.factory import SHORT, make_stimuli, oracle_scorer, simulate_submission, write_json
from tests.tasks.listening.test_browser import PROTOCOL, TRIAL_STATE, _rate
from tests.tasks.listening.test_server_restart import start_server
from voxledger.schemas.listening import Design, PacketManifest
from voxledger.stores.home import Home
from voxledger.tasks.listening.keys import open_sealed_key
from voxledger.tasks.listening.served import SERVED_DIR
from voxledger.tasks.stages.packets import export_packets
from voxledger.tasks.stages.ratings import aggregate_ratings

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"),
]
RATERS = ("r01", "r02", "r03")


def _on_screen(base: str, rater: str) -> int:
    status = json.loads(urllib.request.urlopen(base + "/operator.json", timeout=10).read())
    return int(next(r["on_screen"] for r in status["raters"] if r["rater_id"] == rater))


def aggregated(url: str, files: int) -> dict[str, Any]:
    """The operator page once the server's own aggregate holds ``files`` submissions (within a minute)."""
    deadline = time.monotonic() + 60
    while (status := json.loads(urllib.request.urlopen(url + "/operator.json", timeout=10).read()))["aggregate"].get("files") != files:
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    return dict(status)


def take_test(tmp: Path, url: str, manifest: PacketManifest, key: dict[str, Any], out: dict[str, Any], reload_after: int | None) -> None:
    """One rater's whole session in its own browser; what went wrong (if anything) lands in ``out``."""
    try:
        with Chromium(tmp / "profile", tmp) as browser:
            browser.navigate(url)
            assert "token" not in browser.evaluate("document.getElementById('binding').textContent")
            browser.evaluate("document.getElementById('start').click()")
            seen = []
            while (state := browser.wait_for(TRIAL_STATE + " || (document.getElementById('done') ? 'done' : null)")) != "done":
                assert state != "finish", "the served page showed the static export screen"
                assert state["enabled"] == 0 and not state["next"], f"{state['trial']}: rating possible before playing"
                seen.append(state["trial"])
                _rate(browser, state["trial"], manifest, key, oracle_scorer())
                assert browser.wait_for(TRIAL_STATE)["next"]
                browser.evaluate("document.getElementById('next').click()")
                if len(seen) == reload_after:  # a reload resumes from the server's journal (no local storage)
                    base = url.split("/r/")[0]
                    deadline = time.monotonic() + 20  # once the server has the next item's present event
                    while _on_screen(base, manifest.rater_id) != len(seen) + 1:
                        assert time.monotonic() < deadline
                        time.sleep(0.05)
                    browser.navigate(url.split("/r/")[0] + "/t")
                    assert browser.wait_for("document.getElementById('resume')?.textContent") == f"Resume at item {len(seen) + 1}"
                    assert browser.evaluate("document.getElementById('start')") is None
                    browser.evaluate("document.getElementById('resume').click()")
            out["seen"] = seen
            out["errors"] = list(browser.errors)
            out["local_storage"] = browser.evaluate("localStorage.length")
    except Exception as exc:  # noqa: BLE001  (reported by the test thread)
        out["failure"] = f"{type(exc).__name__}: {exc}"


def test_three_raters_in_chromium_at_once(tmp_path: Path, home: Home) -> None:
    t0 = time.monotonic()
    stimuli = make_stimuli(home, prompts=dict(list(SHORT.items())[:2]), voices={"recordings": ("en-us", 50), "sys_a": ("en+f3", 65)})
    protocol = PROTOCOL.model_copy(update={"design": Design(raters=3, raters_per_prompt=1, gold_items=1, attention_checks=1, seed=3)})
    outcome = export_packets(home, protocol, stimuli, tmp_path / "packets", protocol_name="served-browser-test")
    rid = outcome.receipt_id
    key = {e.pseudonym: e for e in open_sealed_key(home, outcome.receipt.parameters.key_commitment_sha256)[0].entries}
    shutil.copytree(home.root, tmp_path / "twin")  # the file route's home, as it was before serving
    manifests = {r: PacketManifest.model_validate_json((outcome.packet_dirs[r] / "packet.json").read_bytes()) for r in RATERS}

    proc, url, links = start_server(home.root, rid)
    try:
        results: dict[str, dict[str, Any]] = {r: {} for r in RATERS}
        threads = []
        for i, r in enumerate(RATERS):
            (tmp_path / r).mkdir()
            args = (tmp_path / r, url + links[r], manifests[r], key, results[r], 2 if i == 0 else None)
            threads.append(threading.Thread(target=take_test, args=args))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for r in RATERS:
            assert "failure" not in results[r], (r, results[r].get("failure"))
            assert results[r]["seen"] == [t.id for t in manifests[r].trials] and not results[r]["errors"], (r, results[r])
            assert results[r]["local_storage"] == 0
        status = aggregated(url, 3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    served_agg = status["aggregate"]
    assert served_agg["accepted"] == 3, served_agg
    assert [(r["rater_id"], r["finished"], r["log_plausible"]) for r in status["raters"]] == [(r, True, True) for r in RATERS], status

    files = sorted((home.root / SERVED_DIR / rid[:16] / "submissions").glob("*.json"))
    again = aggregate_ratings(home, rid, files)  # `voxledger ratings aggregate` on the served files, unchanged
    assert again.receipt_id == served_agg["receipt"] and again.cached
    docs = {f.stem: json.loads(f.read_text()) for f in files}
    assert all({e["event"] for e in d["log"]} >= {"start", "present", "play", "ended", "rate", "next", "export"} for d in docs.values())
    assert [e["detail"] for e in docs["r01"]["log"] if e["event"] == "start"] == [None, "resumed"]

    twin = Home(tmp_path / "twin")
    paths = [
        write_json(tmp_path / f"{r}.json", simulate_submission(outcome.packet_dirs[r], key, oracle_scorer(), session=f"{i + 1:032x}"))
        for i, r in enumerate(RATERS)
    ]
    by_file = aggregate_ratings(twin, rid, paths).receipt.result
    served = again.receipt.result
    for name in ("scores", "screening", "deltas", "bradley_terry", "agreement", "screening_scores", "rating_rows", "attrition"):
        assert getattr(served, name) == getattr(by_file, name), name
    assert served.submissions_accepted == 3 and not served.rejections and served.rejected_rows == 0
    assert time.monotonic() - t0 < 90
