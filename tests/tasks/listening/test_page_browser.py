"""The rater's page in headless Chromium (issue 32, item 7): reload, flaky audio, a phone screen, storage.

Before: after a reload the resumed item showed no rating and no "played" mark while its old
rating still counted; one 503 turned a play button into a permanent dead end; at 400 x 800 the
page overflowed and Next sat below the fold; MUSHRA never asked for the reference; and every
event rewrote the whole log in localStorage.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.tasks.listening.cdp import CHROMIUM, Chromium
from tests.tasks.listening.factory import SHORT, make_stimuli, oracle_scorer
from tests.tasks.listening.test_browser import PROTOCOL, TRIAL_STATE, _rate
from voxledger.schemas.listening import KeyEntry, PacketManifest, PacketTrial
from voxledger.stores.home import Home
from voxledger.tasks.listening.keys import open_sealed_key
from voxledger.tasks.stages.packets import export_packets

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"),
]


@dataclass(frozen=True)
class Packet:
    folder: Path
    manifest: PacketManifest
    key: dict[str, KeyEntry]

    def trial(self, trial_id: str) -> PacketTrial:
        return next(t for t in self.manifest.trials if t.id == trial_id)


@pytest.fixture
def packet(tmp_path: Path, home: Home) -> Packet:
    stimuli = make_stimuli(home, prompts=dict(list(SHORT.items())[:2]), voices={"recordings": ("en-us", 50), "sys_a": ("en+f3", 65)})
    outcome = export_packets(home, PROTOCOL, stimuli, tmp_path / "packets", protocol_name="page-test")
    key = {e.pseudonym: e for e in open_sealed_key(home, outcome.receipt.parameters.key_commitment_sha256)[0].entries}
    folder = outcome.packet_dirs["r01"]
    return Packet(folder, PacketManifest.model_validate_json((folder / "packet.json").read_bytes()), key)


def advance_to(browser: Chromium, p: Packet, task: str) -> PacketTrial:
    """Rate and pass items until one of ``task`` is shown; return it."""
    while True:
        state = browser.wait_for(TRIAL_STATE)
        assert state != "finish", f"no {task} item left"
        trial = p.trial(state["trial"])
        if trial.task == task:
            return trial
        _rate(browser, trial.id, p.manifest, p.key, oracle_scorer())
        browser.evaluate("document.getElementById('next').click()")


def play(browser: Chromium, stim: str, timeout_s: float = 30) -> None:
    button = f"document.querySelector('button.play[data-stimulus=\"{stim}\"]')"
    browser.evaluate(f"{button}.click()")
    browser.wait_for(f"{button}.classList.contains('done')", timeout_s=timeout_s)


def reload_and_resume(browser: Chromium, url: str) -> None:
    browser.navigate(url)
    browser.wait_for("!!document.getElementById('resume')")
    browser.evaluate("document.getElementById('resume').click()")


ITEM_VIEW = """(() => {
  const sec = document.querySelector('section.trial');
  return {trial: sec.dataset.trial, done: Array.from(sec.querySelectorAll('button.play.done')).map((b) => b.dataset.stimulus).sort(),
          radios: Array.from(sec.querySelectorAll('input[type=radio]:checked')).map((i) => [i.dataset.stimulus, Number(i.value)]),
          sliders: Array.from(sec.querySelectorAll('input[type=range]:not(.unset)')).map((i) => [i.dataset.stimulus, Number(i.value),
                   i.parentElement.querySelector('output').textContent]),
          enabled: sec.querySelectorAll('input:not([disabled])').length, next: !document.getElementById('next').disabled,
          hint: document.getElementById('hint').textContent};
})()"""


def test_reload_resumes_with_ratings_and_played_marks_shown(tmp_path: Path, packet: Packet) -> None:
    url = (packet.folder / "index.html").as_uri()
    score = oracle_scorer()
    checked = set()
    with Chromium(tmp_path / "profile", tmp_path) as browser:
        browser.navigate(url)
        browser.evaluate("document.getElementById('start').click()")
        while (state := browser.wait_for(TRIAL_STATE)) != "finish":
            trial = packet.trial(state["trial"])
            if trial.task in checked or trial.task == "ab":
                _rate(browser, trial.id, packet.manifest, packet.key, score)
                browser.evaluate("document.getElementById('next').click()")
                continue
            if trial.task == "mushra":
                assert trial.reference is not None
                for stim in trial.stimuli:  # every sample, but not the reference: MUSHRA asks for the reference too
                    play(browser, stim)
                view = browser.evaluate(ITEM_VIEW)
                assert view["enabled"] == 0 and "the reference" in view["hint"], view
            _rate(browser, trial.id, packet.manifest, packet.key, score)  # plays what is left, then rates
            before = browser.evaluate(ITEM_VIEW)
            assert before["next"], before
            reload_and_resume(browser, url)
            after = browser.evaluate(ITEM_VIEW)
            assert after == before  # the ratings (sliders with their numbers, checked radios) and the played marks are back
            if trial.task == "mushra":
                assert len(after["sliders"]) == len(trial.stimuli) and sorted(after["done"]) == sorted([*trial.stimuli, trial.reference])
            else:
                stim = trial.stimuli[0]
                assert after["radios"] == [[stim, score(packet.key[stim], trial.criteria[0], trial, None)]] and after["done"] == [stim]
            checked.add(trial.task)
            browser.evaluate("document.getElementById('next').click()")
        assert checked == {"acr", "mushra"} and not browser.errors, browser.errors


class FlakyAudio(http.server.SimpleHTTPRequestHandler):
    """Serves a packet folder; the first request for each audio file gets a 503."""

    failed: set[str]
    requests: list[tuple[str, int]]

    def do_GET(self) -> None:  # noqa: N802  (the http.server name)
        if self.path.endswith(".wav") and self.path not in self.failed:
            self.failed.add(self.path)
            self.requests.append((self.path, 503))
            self.send_error(503, "Service Unavailable")
            return
        self.requests.append((self.path, 200))
        super().do_GET()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def flaky_server(packet: Packet) -> Iterator[tuple[str, type[FlakyAudio]]]:
    handler = type("Handler", (FlakyAudio,), {"failed": set(), "requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(packet.folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html", handler
    finally:
        server.shutdown()
        server.server_close()


def test_audio_that_fails_with_503_is_fetched_again_and_plays(tmp_path: Path, packet: Packet, flaky_server: tuple[str, Any]) -> None:
    url, handler = flaky_server
    with Chromium(tmp_path / "profile", tmp_path) as browser:
        browser.navigate(url)
        browser.evaluate("document.getElementById('start').click()")
        state = browser.wait_for(TRIAL_STATE)
        trial = packet.trial(state["trial"])
        for stim in (trial.reference,) * (trial.task == "mushra" and trial.reference is not None) + trial.stimuli:
            play(browser, stim, timeout_s=40)  # pressed at once: the page retries and then plays, no dead end
        _rate(browser, trial.id, packet.manifest, packet.key, oracle_scorer())
        assert browser.wait_for(TRIAL_STATE)["next"]
        retried = browser.evaluate("document.querySelectorAll('button.retrying').length")
        assert not browser.errors, browser.errors
    failed = {p for p, status in handler.requests if status == 503}
    served = {p for p, status in handler.requests if status == 200 and p.endswith(".wav")}
    assert failed and failed <= served  # every audio file failed once, and was then served
    assert retried == 0


NARROW_LAYOUT = """(() => {
  const vw = window.innerWidth, vh = window.innerHeight;
  const sec = document.querySelector('section.trial');
  const over = Array.from(sec.querySelectorAll('*')).filter((e) => { const r = e.getBoundingClientRect();
      return r.width > 0 && (r.right > vw + 0.5 || r.left < -0.5); }).map((e) => e.tagName + '.' + e.className);
  const sliders = Array.from(sec.querySelectorAll('input[type=range]')).map((i) => i.getBoundingClientRect().width / (i.max - i.min));
  const clipped = Array.from(sec.querySelectorAll('.ticks span')).filter((s) => s.scrollWidth > s.clientWidth + 1).map((s) => s.textContent);
  const overlaps = Array.from(sec.querySelectorAll('.ticks')).flatMap((t) => { const r = Array.from(t.children).map((s) => s.getBoundingClientRect());
      return r.slice(1).filter((b, k) => b.left < r[k].right - 0.5).map(() => t.textContent); });
  const next = document.getElementById('next').getBoundingClientRect();
  return {page_width: document.documentElement.scrollWidth, vw: vw, vh: vh, over: over, px_per_point: Math.min(...sliders),
          clipped: clipped, overlaps: overlaps, next_top: next.top, next_bottom: next.bottom, page_height: document.documentElement.scrollHeight};
})()"""


def test_mushra_item_fits_a_400_by_800_screen(tmp_path: Path, packet: Packet) -> None:
    with Chromium(tmp_path / "profile", tmp_path) as browser:
        browser.call("Emulation.setDeviceMetricsOverride", width=400, height=800, deviceScaleFactor=1, mobile=False)
        browser.navigate((packet.folder / "index.html").as_uri())
        browser.evaluate("document.getElementById('start').click()")
        advance_to(browser, packet, "mushra")
        browser.evaluate("window.scrollTo(0, 0)")
        layout = browser.evaluate(NARROW_LAYOUT)
        browser.screenshot(tmp_path / "narrow.png")
        assert (layout["vw"], layout["vh"]) == (400, 800), layout
        assert layout["page_width"] <= 400 and not layout["over"], layout  # nothing runs off the side
        assert layout["px_per_point"] >= 3, layout  # before: 1.5 px per point
        assert not layout["clipped"] and not layout["overlaps"], layout  # scale labels readable, not run together
        assert 0 <= layout["next_top"] and layout["next_bottom"] <= 800, layout  # Next in view without scrolling
        assert not browser.errors, browser.errors
    assert (tmp_path / "narrow.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_events_are_appended_to_storage_never_rewritten(tmp_path: Path, packet: Packet) -> None:
    url = (packet.folder / "index.html").as_uri()
    with Chromium(tmp_path / "profile", tmp_path) as browser:
        browser.navigate(url)
        browser.evaluate("""(() => { window.sizes = []; const set = Storage.prototype.setItem;
            Storage.prototype.setItem = function (k, v) { window.sizes.push(String(v).length); return set.call(this, k, v); }; })()""")
        browser.evaluate("document.getElementById('start').click()")
        state = browser.wait_for(TRIAL_STATE)
        # a burst: 2,000 presses of a play button (each logs a play, most a pause too)
        browser.evaluate(
            "(() => { const b = document.querySelector('section.trial button.play'); for (let i = 0; i < 2000; i++) b.click(); })()"
        )
        stored = browser.evaluate("""(() => { const keys = Object.keys(localStorage); return {events: keys.filter((k) => k.includes(':log:')).length,
            largest: Math.max(...window.sizes), writes: window.sizes.length}; })()""")
        assert stored["events"] >= 2000, stored
        assert stored["largest"] < 2000, stored  # each write is one event or the small state, not the whole log
        reload_and_resume(browser, url)
        assert browser.wait_for(TRIAL_STATE)["trial"] == state["trial"]
        resumed = browser.evaluate("Object.keys(localStorage).filter((k) => k.includes(':log:')).length")
        assert resumed == stored["events"] + 2  # every event read back, plus the resume's own "start" and "present"
        log = browser.evaluate("""(() => { const p = Object.keys(localStorage).find((k) => !k.includes(':log:'));
            const out = []; for (let n = 0, raw; (raw = localStorage.getItem(p + ':log:' + n)) !== null; n++) out.push(JSON.parse(raw));
            return out; })()""")
        assert [e["t_ms"] for e in log] == sorted(e["t_ms"] for e in log) and log[-2]["detail"] == "resumed"
        assert not browser.errors, browser.errors
