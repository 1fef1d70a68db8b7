"""A rater's packet in real headless Chromium: play, rate, export; aggregation accepts it, a tampered copy is refused."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.tasks.listening.cdp import CHROMIUM, Chromium
from tests.tasks.listening.factory import SHORT, make_stimuli, oracle_scorer
from voxledger.schemas.errors import PacketError
from voxledger.schemas.listening import (
    AbCriterion,
    AcrCriterion,
    Design,
    ListeningProtocol,
    MushraCriterion,
    PacketManifest,
)
from voxledger.stores.home import Home
from voxledger.tasks.listening.keys import open_sealed_key
from voxledger.tasks.stages.packets import export_packets
from voxledger.tasks.stages.ratings import aggregate_ratings

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"),
]
DOCS_IMAGE = Path(__file__).resolve().parents[3] / "docs" / "img" / "packet.png"
PROTOCOL = ListeningProtocol(
    name="browser-test",
    criteria=(
        AcrCriterion(task="acr", name="naturalness", question="How natural does this voice sound?"),
        MushraCriterion(task="mushra", name="quality", question="Rate the overall quality of each sample against the reference."),
        AbCriterion(task="ab", name="preference", question="Which sample sounds more natural?", include_reference=True),
    ),
    design=Design(raters=2, raters_per_prompt=1, gold_items=1, attention_checks=1, seed=3),
)
TRIAL_STATE = """(() => {
  const sec = document.querySelector('section.trial');
  if (!sec) return document.getElementById('export') ? 'finish' : null;
  return {trial: sec.dataset.trial, enabled: sec.querySelectorAll('input:not([disabled])').length,
          next: !document.getElementById('next').disabled};
})()"""


def _rate(browser: Chromium, trial_id: str, manifest: PacketManifest, key: dict, scorer) -> None:  # type: ignore[no-untyped-def, type-arg]
    trial = next(t for t in manifest.trials if t.id == trial_id)
    for stim in (trial.reference,) * (trial.task in ("mushra", "smos") and trial.reference is not None) + trial.stimuli:
        browser.evaluate(f"document.querySelector('button.play[data-stimulus=\"{stim}\"]').click()")
        browser.wait_for(f"document.querySelector('button.play[data-stimulus=\"{stim}\"]').classList.contains('done')", timeout_s=20)
    versus = key[trial.stimuli[0]] if trial.task == "ab" else None
    for crit in trial.criteria:
        for stim in [trial.stimuli[1]] if trial.task == "ab" else trial.stimuli[:1] if trial.task in ("acr", "smos") else trial.stimuli:
            v = scorer(key[stim], crit, trial, versus)
            if trial.task == "mushra":
                browser.evaluate(f"(() => {{ const e = document.querySelector('input[type=range][data-stimulus=\"{stim}\"]');"
                                 f" e.value = {v}; e.dispatchEvent(new Event('input', {{bubbles: true}})); }})()")  # fmt: skip
            else:
                browser.evaluate(f'document.querySelector(\'input[type=radio][name="{trial.id}|{stim}|{crit}"][value="{v}"]\').click()')


def test_rater_completes_packet_in_chromium(tmp_path: Path, home: Home) -> None:
    t0 = time.monotonic()
    stimuli = make_stimuli(home, prompts=dict(list(SHORT.items())[:2]), voices={"recordings": ("en-us", 50), "sys_a": ("en+f3", 65)})
    outcome = export_packets(home, PROTOCOL, stimuli, tmp_path / "packets", protocol_name="browser-test")
    blinding, _ = open_sealed_key(home, outcome.receipt.parameters.key_commitment_sha256)
    key = {e.pseudonym: e for e in blinding.entries}
    packet = outcome.packet_dirs["r01"]
    manifest = PacketManifest.model_validate_json((packet / "packet.json").read_bytes())
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    screenshots = 0
    with Chromium(tmp_path / "profile", downloads) as browser:
        browser.navigate((packet / "index.html").as_uri())
        assert browser.evaluate("voxledgerSelfTest()") == (
            # FIPS 180-2 "abc" vector, and HMAC-SHA256("key", pangram) as Python's hmac computes it
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad "
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        )
        browser.evaluate("document.getElementById('start').click()")
        seen = []
        while (state := browser.wait_for(TRIAL_STATE)) != "finish":
            assert state["enabled"] == 0 and not state["next"], f"{state['trial']}: rating possible before playing"
            seen.append(state["trial"])
            _rate(browser, state["trial"], manifest, key, oracle_scorer())
            assert browser.wait_for(TRIAL_STATE)["next"], f"{state['trial']}: Next not enabled after rating"
            if next(t.task for t in manifest.trials if t.id == state["trial"]) == "mushra" and not screenshots:
                browser.screenshot(tmp_path / "packet.png", selector="main")
                screenshots += 1
            browser.evaluate("document.getElementById('next').click()")
            if len(seen) == 2:  # a reload mid-test keeps the session: resume where the rater was
                browser.navigate((packet / "index.html").as_uri())
                assert browser.wait_for("document.getElementById('resume')?.textContent") == "Resume at item 3"
                browser.evaluate("document.getElementById('resume').click()")
        assert seen == [t.id for t in manifest.trials]
        browser.evaluate("document.getElementById('export').click()")
        shown = browser.wait_for("document.getElementById('submission').value")
        deadline = time.monotonic() + 15
        while not (files := [p for p in downloads.glob("submission-*.json")]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not browser.errors, browser.errors
    assert files, "the page did not download a submission file"
    submission = files[0]
    assert json.loads(submission.read_text()) == json.loads(shown)
    assert screenshots == 1 and (tmp_path / "packet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("VOXLEDGER_UPDATE_DOC_IMAGES") == "1":  # refresh docs/img only when asked
        shutil.copyfile(tmp_path / "packet.png", DOCS_IMAGE)

    agg = aggregate_ratings(home, outcome.receipt_id, [submission])
    result = agg.receipt.result
    assert result.submissions_accepted == 1 and not result.rejections and result.rejected_rows == 0
    assert result.attrition.missing_raters == ("r02",)
    assert [s.included for s in result.screening] == [True]  # gold, attention and MUSHRA reference answered right
    doc = json.loads(submission.read_text())
    assert {e["event"] for e in doc["log"]} >= {"start", "present", "play", "ended", "rate", "next", "export"}
    assert [e["detail"] for e in doc["log"] if e["event"] == "start"] == [None, "resumed"]

    tampered = tmp_path / "tampered.json"
    doc["ratings"][0]["score"] = 1 if doc["ratings"][0]["score"] != 1 else 2
    tampered.write_text(json.dumps(doc))
    with pytest.raises(PacketError, match="edited after export"):
        aggregate_ratings(home, outcome.receipt_id, [tampered])
    assert time.monotonic() - t0 < 60


A11Y_STATE = """(() => {
  const sec = document.querySelector('section.trial');
  return {trial: sec.dataset.trial, focus_in_trial: sec.contains(document.activeElement), focus_id: document.activeElement.id,
          how: sec.querySelector('p.how')?.textContent || '', hint: document.getElementById('hint')?.textContent || '',
          hint_live: document.getElementById('hint')?.getAttribute('aria-live'),
          unlabelled_buttons: Array.from(sec.querySelectorAll('button.play')).filter((b) => !b.getAttribute('aria-label')).length,
          unlabelled_inputs: Array.from(sec.querySelectorAll('input[type=range]')).filter((i) => !i.getAttribute('aria-label')).length
            + Array.from(sec.querySelectorAll('.scale')).filter((g) => g.getAttribute('role') !== 'radiogroup' || !g.getAttribute('aria-label')).length,
          slider_text: Array.from(sec.querySelectorAll('input[type=range]')).map((i) => i.getAttribute('aria-valuetext'))};
})()"""


def test_page_is_accessible_and_explains_itself(tmp_path: Path, home: Home) -> None:
    # two prompts: a rater hears a prompt in A/B or in ACR/MUSHRA, never both (design.split), so one of each
    stimuli = make_stimuli(home, prompts=dict(list(SHORT.items())[:2]), voices={"recordings": ("en-us", 50), "sys_a": ("en+f3", 65)})
    protocol = PROTOCOL.model_copy(update={"design": Design(raters=1, raters_per_prompt=1, gold_items=0, attention_checks=0, seed=3)})
    outcome = export_packets(home, protocol, stimuli, tmp_path / "packets", protocol_name="a11y-test")
    key = {e.pseudonym: e for e in open_sealed_key(home, outcome.receipt.parameters.key_commitment_sha256)[0].entries}
    packet = outcome.packet_dirs["r01"]
    manifest = PacketManifest.model_validate_json((packet / "packet.json").read_bytes())
    with Chromium(tmp_path / "profile", tmp_path) as browser:
        browser.navigate((packet / "index.html").as_uri())
        browser.evaluate("document.getElementById('start').click()")
        tasks_seen = set()
        while (state := browser.wait_for(TRIAL_STATE)) != "finish":
            a11y = browser.evaluate(A11Y_STATE)
            task = next(t.task for t in manifest.trials if t.id == a11y["trial"])
            tasks_seen.add(task)
            assert a11y["focus_in_trial"] and a11y["focus_id"] == "progress", a11y  # focus moved to the new item
            assert a11y["unlabelled_buttons"] == 0 and a11y["unlabelled_inputs"] == 0, a11y
            assert a11y["hint_live"] == "polite" and a11y["hint"].startswith("Rating is disabled until you play "), a11y
            if task == "mushra":
                assert "hidden" in a11y["how"] and "anchor" in a11y["how"]
                assert set(a11y["slider_text"]) == {"not rated"}  # nothing looks recorded before the rater moves a slider
            _rate(browser, state["trial"], manifest, key, oracle_scorer())
            assert browser.evaluate("document.getElementById('hint').textContent").startswith("All rated: press ")
            browser.evaluate("document.getElementById('next').click()")
        assert tasks_seen == {"acr", "mushra", "ab"} and not browser.errors, browser.errors
