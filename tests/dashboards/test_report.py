"""The dashboard of a real pipeline run, opened in headless Chromium: every section is there, the
audio plays from the page itself, and nothing refers to the network."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from tests.tasks.listening.cdp import CHROMIUM, Chromium
from voxledger.dashboards.report import SECTIONS, build_dashboard
from voxledger.stores.home import Home

pytestmark = pytest.mark.prefect

NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
CANDIDATES = ("base", "adapter", "recordings")  # the evaluation plan of tests/flows/conftest.py
PROMPTS = 2  # it has two prompts, fewer than the three the page embeds at most


def test_dashboard_renders_offline_in_chromium(first_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home = Home(first_run[0])
    out = build_dashboard(home.catalog, tmp_path / "dashboard.html", blobs=home.blobs.get_bytes)
    html = out.read_text()
    size = out.stat().st_size
    print(f"dashboard: {size:,} bytes")
    assert size < 3_000_000, "the embedded audio should stay a few clips per candidate"
    assert "<script" not in html  # charts are inline SVG: nothing to fetch or execute
    urls = set(re.findall(r"https?://[^\"' )<]+", html)) - NAMESPACES
    assert not urls, f"the dashboard refers to the network: {urls}"
    links = re.findall(r"""(?:src|href)=["']([^"']*)""", html) + re.findall(r"url\(([^)]*)\)", html)
    assert links and all(u.startswith(("data:", "#")) for u in links), {u[:40] for u in links if not u.startswith(("data:", "#"))}
    for name in (
        "p-base (full, tiny)",
        "p-lora (lora, tiny)",
        "checkpoints x2",
        "epochs 0-1, best = epoch",
        "no CI",
        "cluster_t needs at least",
    ):
        assert name in html, name  # panels and boxes named by plan, collapsed checkpoints, missing CIs said so with their note
    assert not re.search(r"\[(-?[\d.e-]+), \1\]", html), "an interval rendered with zero width"
    if not CHROMIUM.exists():
        pytest.skip("needs /usr/bin/chromium (apt-get install -y chromium) for the rendering half of this test")
    with Chromium(tmp_path / "profile", tmp_path / "dl") as browser:
        browser.navigate(out.as_uri())
        assert browser.evaluate("[...document.querySelectorAll('h2')].map(h => h.textContent)") == [t for _, t in SECTIONS]
        _check_sections(browser)
        _check_audio(browser)
        assert browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)") == []  # nothing was fetched
        _full_page_screenshot(browser, tmp_path / "dashboard.png")
        assert not browser.errors, browser.errors
    assert (tmp_path / "dashboard.png").stat().st_size > 50_000
    print(f"dashboard screenshot: {tmp_path / 'dashboard.png'}")


def _check_sections(browser: Chromium) -> None:
    stage_rows = browser.evaluate("[...document.querySelectorAll('#pipeline ~ table')][0].querySelectorAll('tr').length")
    assert stage_rows == 1 + 7  # header + one row per stage
    times = browser.evaluate("[...document.querySelectorAll('#pipeline ~ table')][0].innerText")
    assert "wall time" in times and "train_base" in times and re.search(r"\+\d+\.\d s", times)
    gate = browser.evaluate(
        "(() => { const t = document.querySelector('table.gate-rules'); return t ? [...t.rows].map(r => r.innerText) : null })()"
    )
    assert gate and all(h in gate[0] for h in ("rule", "statistic", "value", "threshold", "passed", "detail")), gate
    assert len(gate) >= 2 and "content_gate_pass" in gate[1] and "challenger_mean" in gate[1]
    bands = browser.evaluate("[...document.querySelectorAll('table.equivalence-bands .band')].map(b => b.textContent)")
    assert bands and set(bands) <= {"GREEN", "YELLOW", "RED"}
    panels = browser.evaluate("document.querySelectorAll('svg').length")
    assert panels >= 6  # stage times, training curves, intervals, forest plot, equivalence bands, lineage
    assert browser.evaluate("document.querySelector('svg.lineage').getBoundingClientRect().height") < 600


def _check_audio(browser: Chromium) -> None:
    js = (
        "Object.fromEntries(" + json.dumps(CANDIDATES) + ".map(c => [c, document.querySelectorAll(`audio[data-candidate='${c}']`).length]))"
    )
    counts = browser.evaluate(js)
    assert counts == dict.fromkeys(CANDIDATES, PROMPTS)
    assert browser.evaluate("[...document.querySelectorAll('audio')].every(a => a.src.startsWith('data:audio/'))")
    browser.evaluate("document.querySelectorAll('audio').forEach(a => { a.preload = 'metadata'; a.load(); })")
    durations = browser.wait_for("(() => { const d = [...document.querySelectorAll('audio')].map(a => a.duration);"
                                 " return d.every(x => x > 0) ? d : null })()")  # fmt: skip
    assert len(durations) == len(CANDIDATES) * PROMPTS  # every embedded clip decodes in the browser


def _full_page_screenshot(browser: Chromium, path: Path) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
    height = browser.evaluate("document.documentElement.scrollHeight")
    shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                        clip={"x": 0, "y": 0, "width": 1400, "height": height, "scale": 1})  # fmt: skip
    path.write_bytes(base64.b64decode(shot["data"]))
