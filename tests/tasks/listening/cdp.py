"""A minimal Chrome DevTools Protocol client for driving headless Chromium in tests.

Launches ``/usr/bin/chromium`` with a private profile and no background networking, connects to
the page target over a websocket (``websockets`` sync client) and offers ``evaluate``,
``wait_for``, ``screenshot`` and download capture. JavaScript exceptions thrown by the page are
collected in ``errors`` so a test can assert the page ran cleanly.
"""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Self

from websockets.sync.client import connect

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--autoplay-policy=no-user-gesture-required", "--window-size=900,1000",
)  # fmt: skip


class Chromium:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, profile: Path, downloads: Path) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self._ids = itertools.count(1)
        self._proc = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        port = self._port(profile / "DevToolsActivePort")
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t["type"] == "page")
        self._ws = connect(page["webSocketDebuggerUrl"], max_size=2**26, open_timeout=10)
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Page.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))

    def _port(self, path: Path, timeout_s: float = 20.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists() and len(path.read_text().split()) >= 2:
                return path.read_text().split()[0]
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._proc.returncode} before opening its debugging port")
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its debugging port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; page exceptions seen meanwhile go to ``errors``."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv(timeout=60))
            if msg.get("method") == "Runtime.exceptionThrown":
                self.errors.append(json.dumps(msg["params"]["exceptionDetails"])[:500])
            if msg.get("method") == "Page.javascriptDialogOpening":  # a dialog blocks navigation: say so when a wait times out
                self.dialogs.append(json.dumps(msg["params"])[:300])
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]  # type: ignore[no-any-return]

    def evaluate(self, expression: str) -> Any:
        """Evaluate JavaScript in the page and return its (JSON) value; raise on a thrown error."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error in {expression[:80]!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        try:
            seen = self.evaluate("location.href + ' | ' + document.readyState + ' | ' + document.body.innerText.slice(0, 300)")
        except RuntimeError as exc:
            seen = f"(page unreadable: {exc})"
        raise TimeoutError(f"timed out after {timeout_s} s waiting for {expression}; the page: {seen!r}; dialogs: {self.dialogs}")

    def navigate(self, url: str) -> None:
        """Open ``url`` and wait until the document has loaded."""
        self.call("Page.navigate", url=url)
        time.sleep(0.2)
        self.wait_for("document.readyState === 'complete'")

    def screenshot(self, path: Path, selector: str | None = None, margin_px: int = 16) -> None:
        """Save a PNG of the viewport, or of the element matching ``selector`` plus a margin."""
        params: dict[str, Any] = {"format": "png"}
        if selector:
            box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                                " return [r.x, r.y, r.width, r.height]; })()")  # fmt: skip
            params["clip"] = {"x": max(0, box[0] - margin_px), "y": max(0, box[1] - margin_px),
                              "width": box[2] + 2 * margin_px, "height": box[3] + 2 * margin_px, "scale": 1}  # fmt: skip
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))

    def close(self) -> None:
        """Close the connection and stop the browser."""
        try:
            self._ws.close()
        finally:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
