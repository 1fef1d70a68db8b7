"""A rater driving a served packet set over HTTP as the page does (same requests, same order).

``ServedRater`` opens its link, reads the page's packet and binding, fetches each sample, posts
start/present/play/ended/rate/next events and finally asks the server to seal its answers. The
server's clock is the test's ``Clock``: advancing it by a sample's duration between ``play`` and
``ended`` is what real-time listening looks like to the server, without waiting.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.tasks.listening.factory import Scorer
from voxledger.schemas.listening import KeyEntry, PacketManifest, PacketTrial
from voxledger.tasks.listening.verify import rated_stimuli


@dataclass
class Clock:
    """A server clock the test moves (seconds since the epoch)."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def page_parts(html: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The packet document and the binding a served page holds."""
    found = dict(re.findall(r'<script type="application/json" id="(packet|binding)">(.*?)</script>', html, flags=re.DOTALL))
    return json.loads(found["packet"]), json.loads(found["binding"])


class ServedRater:
    """One rater on one HTTP client (its cookie jar is the browser's)."""

    def __init__(self, client: Any, link: str, key: dict[str, KeyEntry], scorer: Scorer, clock: Clock | None = None) -> None:
        self.client, self.key, self.scorer, self.clock = client, key, scorer, clock
        self.open(link)
        self.manifest = PacketManifest.model_validate({**self.packet, "audio": []})
        self.durations: dict[str, float] = {}

    def open(self, path: str = "/t") -> None:
        r = self.client.get(path)
        assert r.status_code == 200, (r.status_code, r.text[:200])
        self.html = r.text
        self.packet, self.binding = page_parts(r.text)
        self.seq = self.binding["state"]["seq"]
        self.audio = {a["id"]: a["file"] for a in self.packet["audio"]}

    def post(self, event: str, trial: str | None = None, stimulus: str | None = None, detail: str | None = None) -> Any:
        body = {"page": self.binding["page"], "seq": self.seq, "event": event, "trial": trial, "stimulus": stimulus, "detail": detail}
        r = self.client.post("/api/events", json=body)
        if r.status_code == 200:
            self.seq += 1
        return r

    def ok(self, *args: Any) -> None:
        r = self.post(*args)
        assert r.status_code == 200, (args, r.status_code, r.text)

    def listen(self, trial: PacketTrial, stim: str, duration_s: float) -> None:
        r = self.client.get(self.audio[stim], headers={"Range": "bytes=0-"})
        assert r.status_code == 206, r.status_code
        self.ok("play", trial.id, stim)
        if self.clock is not None:
            self.clock.now += duration_s + 0.05
        self.ok("ended", trial.id, stim)

    def rate_trial(self, trial: PacketTrial, durations_s: dict[str, float], press_next: bool = True) -> list[tuple[str, str, str, int]]:
        """Present, play every needed sample to the end, rate each cell; returns the answers given."""
        self.ok("present", trial.id)
        for stim in (trial.reference,) * (trial.task == "mushra" and trial.reference is not None) + trial.stimuli:
            self.listen(trial, stim, durations_s.get(stim, 0.0))
        versus = self.key[trial.stimuli[0]] if trial.task == "ab" else None
        given = []
        for crit in trial.criteria:
            for s in rated_stimuli(trial):
                score = self.scorer(self.key[s], crit, trial, versus)
                self.ok("rate", trial.id, s, f"{crit}={score}")
                given.append((trial.id, s, crit, score))
        if press_next:
            self.ok("next", trial.id)
        return given

    def finish(self) -> Any:
        return self.client.post("/api/finish", json={"page": self.binding["page"]})
