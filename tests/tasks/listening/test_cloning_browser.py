"""The page's headphone check, familiarisation and SMOS items in headless Chromium at 400 x 800 (issue 61).

One short packet: a Huggins-pitch trial, two unscored practice items, then ACR and SMOS items;
the export must hold no practice rating or event, and the completion code and link must show.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.tasks.listening.cdp import CHROMIUM, Chromium
from tests.tasks.listening.factory import SHORT, make_stimuli, oracle_scorer
from tests.tasks.listening.test_browser import TRIAL_STATE, _rate
from tests.tasks.listening.test_server_browser import aggregated
from tests.tasks.listening.test_server_restart import start_server
from voxledger.schemas.listening import (
    AcrCriterion,
    Completion,
    Design,
    HeadphoneCheck,
    ListeningProtocol,
    PacketManifest,
    SmosCriterion,
)
from voxledger.stores.home import Home
from voxledger.tasks.listening.keys import open_sealed_key
from voxledger.tasks.listening.served import SERVED_DIR
from voxledger.tasks.stages.packets import export_packets
from voxledger.tasks.stages.ratings import aggregate_ratings

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"),
]
PROTOCOL = ListeningProtocol(
    name="cloning-browser-test",
    criteria=(
        AcrCriterion(task="acr", name="naturalness", question="How natural does this voice sound?"),
        SmosCriterion(task="smos", name="similarity", question="How similar is the voice of the sample to the reference voice?"),
    ),
    design=Design(raters=1, raters_per_prompt=1, gold_items=1, attention_checks=0, seed=2, familiarisation_trials=2),
    headphone_check=HeadphoneCheck(method="huggins_pitch", trials=1, pass_min=1, burst_s=0.3, gap_s=0.1),
    completion=Completion(code="per_rater", redirect_url="https://example.org/done?cc={code}"),
)
SCREEN = """(() => {
  const sec = document.querySelector('section[data-phase]');
  const vw = window.innerWidth;
  const over = sec ? Array.from(sec.querySelectorAll('*')).filter((e) => { const r = e.getBoundingClientRect();
      return r.width > 0 && (r.right > vw + 0.5 || r.left < -0.5); }).map((e) => e.tagName + '.' + e.className) : [];
  const next = document.getElementById('next');
  return {phase: sec && sec.dataset.phase, trial: sec && sec.dataset.trial, progress: document.getElementById('progress')?.textContent,
          enabled: sec ? sec.querySelectorAll('input:not([disabled])').length : 0, over: over,
          page_width: document.documentElement.scrollWidth, next_bottom: next ? next.getBoundingClientRect().bottom : null};
})()"""


def play_all(browser: Chromium) -> None:
    """Press every play button of the screen, each after the one before has played to the end."""
    for stim in browser.evaluate("Array.from(document.querySelectorAll('button.play')).map((b) => b.dataset.stimulus)"):
        button = f"document.querySelector('button.play[data-stimulus=\"{stim}\"]')"
        browser.evaluate(f"{button}.click()")
        browser.wait_for(f"{button}.classList.contains('done')", timeout_s=20)


def fits(screen: dict) -> None:  # type: ignore[type-arg]
    assert screen["page_width"] <= 400 and not screen["over"], screen  # nothing runs off the side at 400 px
    assert screen["next_bottom"] is None or screen["next_bottom"] <= 800, screen  # Next in view without scrolling


def take_screens(browser: Chromium, manifest: PacketManifest, key: dict[str, Any], shot: Path) -> None:
    """Start, pass the headphone check, take both practice items, then rate every scored item (SMOS screen checked at 400 px)."""
    browser.evaluate("document.getElementById('start').click()")
    screen = browser.wait_for(SCREEN)
    assert (screen["phase"], screen["enabled"]) == ("headphones", 0), screen  # no answer before the sound has played
    fits(screen)
    play_all(browser)
    assert manifest.headphone_check is not None
    browser.evaluate(f"document.querySelector('input[data-headphones=\"{manifest.headphone_check.trials[0].answer}\"]').click()")
    browser.evaluate("document.getElementById('next').click()")
    for n, practice in enumerate(manifest.familiarisation, 1):
        screen = browser.wait_for(f"(() => {{ const s = {SCREEN}; return s.trial === '{practice.id}' ? s : null; }})()")
        assert screen["phase"] == "familiarisation" and screen["progress"] == f"Practice item {n} of 2: not scored", screen
        fits(screen)
        play_all(browser)
        browser.evaluate("document.querySelectorAll('input[type=radio]')[2].click()")
        browser.evaluate("document.getElementById('next').click()")
    seen = []
    done = TRIAL_STATE + " || (document.getElementById('done') ? 'finish' : null)"  # the served page ends on its own screen
    while (state := browser.wait_for(done)) != "finish":
        trial = next(t for t in manifest.trials if t.id == state["trial"])
        if trial.task == "smos" and "smos" not in seen:
            screen = browser.evaluate(SCREEN)
            fits(screen)
            names = browser.evaluate("Array.from(document.querySelectorAll('button.play')).map((b) => b.dataset.name)")
            assert names == ["the reference", "the sample"] and screen["enabled"] == 0, (names, screen)
            browser.screenshot(shot, selector="main")
        seen.append(trial.task)
        _rate(browser, trial.id, manifest, key, oracle_scorer())
        browser.evaluate("document.getElementById('next').click()")
    assert seen.count("smos") == sum(t.task == "smos" for t in manifest.trials)


def test_headphones_practice_and_smos_in_chromium_at_400_by_800(tmp_path: Path, home: Home) -> None:
    stimuli = make_stimuli(home, prompts=SHORT, voices={"recordings": ("en-us", 50), "sys_a": ("en+f3", 65)})
    outcome = export_packets(home, PROTOCOL, stimuli, tmp_path / "packets", protocol_name="cloning-browser-test")
    key = {e.pseudonym: e for e in open_sealed_key(home, outcome.receipt.parameters.key_commitment_sha256)[0].entries}
    folder = outcome.packet_dirs["r01"]
    manifest = PacketManifest.model_validate_json((folder / "packet.json").read_bytes())
    assert manifest.headphone_check and manifest.completion and len(manifest.familiarisation) == 2
    assert "smos" in {t.task for t in manifest.trials}
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with Chromium(tmp_path / "profile", downloads) as browser:
        browser.call("Emulation.setDeviceMetricsOverride", width=400, height=800, deviceScaleFactor=1, mobile=False)
        browser.navigate((folder / "index.html").as_uri())
        take_screens(browser, manifest, key, tmp_path / "smos.png")
        browser.evaluate("document.getElementById('export').click()")
        code = browser.wait_for("document.getElementById('completion-code')?.textContent")
        link = browser.evaluate("document.getElementById('completion-link').href")
        deadline = time.monotonic() + 15
        while not (files := list(downloads.glob("submission-*.json"))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not browser.errors, browser.errors
    assert code == manifest.completion.code and link == f"https://example.org/done?cc={code}"
    assert (tmp_path / "smos.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(files[0].read_text())
    assert not [e for e in doc["log"] if (e["trial"] or "t")[0] in "fh"] and not [r for r in doc["ratings"] if r["trial"][0] != "t"]
    details = [e["detail"] for e in doc["log"] if e["event"] == "start" and e["detail"]]
    assert details == ["headphones huggins_pitch try 1: 1/1 passed", "familiarisation: 2 practice items done"]
    result = aggregate_ratings(home, outcome.receipt_id, [files[0]]).receipt.result
    assert result.submissions_accepted == 1 and result.rejected_rows == 0 and result.attrition.missing_cells == 0


def test_the_served_page_takes_the_same_screens_and_the_server_keeps_only_scored_answers(tmp_path: Path, home: Home) -> None:
    # the collection server's page (answers sent as they are given) with the headphone check, practice and SMOS
    stimuli = make_stimuli(home, prompts=SHORT, voices={"recordings": ("en-us", 50), "sys_a": ("en+f3", 65)})
    outcome = export_packets(home, PROTOCOL, stimuli, tmp_path / "packets", protocol_name="cloning-served-test")
    rid = outcome.receipt_id
    key = {e.pseudonym: e for e in open_sealed_key(home, outcome.receipt.parameters.key_commitment_sha256)[0].entries}
    manifest = PacketManifest.model_validate_json((outcome.packet_dirs["r01"] / "packet.json").read_bytes())
    proc, url, links = start_server(home.root, rid)
    try:
        with Chromium(tmp_path / "profile", tmp_path) as browser:
            browser.call("Emulation.setDeviceMetricsOverride", width=400, height=800, deviceScaleFactor=1, mobile=False)
            browser.navigate(url + links["r01"])
            take_screens(browser, manifest, key, tmp_path / "smos.png")
            code = browser.wait_for("document.getElementById('completion-code')?.textContent")
            link = browser.evaluate("document.getElementById('completion-link').href")
            fits(browser.evaluate(SCREEN.replace("section[data-phase]", "section.finish")))
            assert not browser.errors, browser.errors
        status = aggregated(url, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert manifest.completion is not None and code == manifest.completion.code and link == f"https://example.org/done?cc={code}"
    assert status["aggregate"]["accepted"] == 1, status
    (served,) = sorted((home.root / SERVED_DIR / rid[:16] / "submissions").glob("*.json"))
    doc = json.loads(served.read_text())
    assert not [e for e in doc["log"] if (e["trial"] or "t")[0] in "fh"] and not [r for r in doc["ratings"] if r["trial"][0] != "t"]
    details = [e["detail"] for e in doc["log"] if e["event"] == "start" and e["detail"]]
    assert details == ["headphones huggins_pitch try 1: 1/1 passed", "familiarisation: 2 practice items done"], details
    result = aggregate_ratings(home, rid, [served]).receipt.result
    assert result.submissions_accepted == 1 and result.rejected_rows == 0 and result.attrition.missing_cells == 0
    assert {s.task for s in result.scores} >= {"acr", "smos"}
