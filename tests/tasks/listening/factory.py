"""Deterministic listening-test material: espeak stimuli in a home and page-faithful simulated raters.

``simulate_submission`` writes exactly what the page exports (same fields, same log events, same
MAC), so aggregation tests run in milliseconds; ``test_browser.py`` checks the page itself.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Collection
from functools import cache
from pathlib import Path
from typing import Any

import soundfile as sf

from voxledger.schemas.listening import KeyEntry, PacketManifest, PacketTrial, Stimulus, StimulusSet
from voxledger.stores.home import Home
from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
from voxledger.tasks.listening.keys import submission_mac
from voxledger.tasks.listening.verify import rated_stimuli

EVAL_PLAN_SHA256 = "e" * 64
PROMPTS = {
    "p01": ("news", "The birch canoe slid on the smooth planks."),
    "p02": ("chat", "Glue the sheet to the dark blue background."),
    "p03": ("news", "It is easy to tell the depth of a well."),
    "p04": ("chat", "These days a chicken leg is a rare dish."),
    "p05": ("news", "Rice is often served in round bowls."),
    "p06": ("chat", "The juice of lemons makes fine punch."),
}
SHORT = {"p01": ("news", "Good morning."), "p02": ("chat", "Thank you."), "p03": ("news", "See you soon.")}
VOICES = {"recordings": ("en-us", 50), "sys_a": ("en+f3", 65), "sys_b": ("en+m7", 35)}
QUALITY = {"recordings": 4.6, "sys_a": 3.6, "sys_b": 2.4, "low_anchor": 1.2, "gold_degraded": 1.0}  # ACR-like truth
SIMILARITY = {"recordings": 4.7, "sys_a": 2.2, "sys_b": 3.4}  # SMOS-like truth: sys_b's voice is nearer the target's


@cache
def wav_bytes(text: str, voice: str, pitch: int) -> bytes:
    """16 kHz PCM-16 WAV of espeak speaking ``text`` (cached per process)."""
    audio = resample_synthesis(synthesize(text, voice=voice, pitch=pitch), 16000).audio
    buf = io.BytesIO()
    sf.write(buf, audio, 16000, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def make_stimuli(home: Home, prompts: dict[str, tuple[str, str]] = PROMPTS, voices: dict[str, tuple[str, int]] = VOICES) -> StimulusSet:
    """Synthesize every (prompt, candidate), put the audio in the store, return the stimulus set."""
    stimuli = []
    for pid, (category, text) in prompts.items():
        for cand, (voice, pitch) in voices.items():
            sha = home.blobs.put_bytes(wav_bytes(text, voice, pitch))
            stimuli.append(Stimulus(prompt_id=pid, category=category, text=text, candidate=cand, seed=0, audio_sha256=sha))
    return StimulusSet(evaluation_plan_sha256=EVAL_PLAN_SHA256, stimuli=tuple(stimuli))


def read_binding(page: Path) -> dict[str, str]:
    """The packet digest and token embedded in a packet's index.html."""
    match = re.search(r'<script type="application/json" id="binding">(.*?)</script>', page.read_text(encoding="utf-8"))
    assert match, f"no binding in {page}"
    return json.loads(match.group(1))


Scorer = Callable[[KeyEntry, str, PacketTrial, KeyEntry | None], int]


def oracle_scorer(bias: float = 0.0) -> Scorer:
    """A careful rater: scores follow QUALITY (plus ``bias``), checks answered correctly."""

    def score(e: KeyEntry, criterion: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        if e.expected is not None:
            return e.expected
        q = QUALITY.get(e.candidate, 3.0) + bias
        if trial.task == "acr":
            return int(min(5, max(1, round(q))))
        if trial.task == "smos":
            return int(min(5, max(1, round(SIMILARITY.get(e.candidate, 3.0) + bias))))
        if trial.task == "mushra":
            return 100 if e.role == "hidden_reference" else int(min(100, max(0, round(20 * q))))
        assert versus is not None
        return int(max(-3, min(3, round(q - QUALITY.get(versus.candidate, 3.0)))))

    return score


def durations_ms(packet_dir: Path, manifest: PacketManifest) -> dict[str, int]:
    """Length of every audio file of a packet in whole milliseconds (rounded up)."""
    return {a.id: -(-sf.info(str(packet_dir / a.file)).frames * 1000 // 16000) for a in manifest.audio}


def simulate_submission(packet_dir: Path, key: dict[str, KeyEntry], scorer: Scorer, *, skip_trials: int = 0, session: str = "a" * 32,
                        play_ms: int | None = None, skip: Collection[str] = ()) -> dict[str, Any]:  # fmt: skip
    """The submission the page would export after rating every trial (but the last ``skip_trials``, and those in ``skip``).

    Each sample plays for its real duration, or ``play_ms`` when given (a fabricated log).
    """
    manifest = PacketManifest.model_validate_json((packet_dir / "packet.json").read_bytes())
    binding = read_binding(packet_dir / "index.html")
    lengths = durations_ms(packet_dir, manifest)
    t, log, ratings = 100, [], []

    def note(event: str, trial: str | None = None, stimulus: str | None = None, detail: str | None = None, after_ms: int = 700) -> None:
        nonlocal t
        t += after_ms
        log.append({"t_ms": t, "event": event, "trial": trial, "stimulus": stimulus, "detail": detail})

    note("start")
    trials = [t for t in manifest.trials[: len(manifest.trials) - skip_trials] if t.id not in skip]
    for trial in trials:
        note("present", trial.id)
        for s in (trial.reference,) * (
            trial.task in ("mushra", "smos") and trial.reference is not None
        ) + trial.stimuli:  # the page asks for the reference first
            note("play", trial.id, s)
            note("ended", trial.id, s, after_ms=lengths[s] + 20 if play_ms is None else play_ms)
        versus = key[trial.stimuli[0]] if trial.task == "ab" else None
        for crit in trial.criteria:
            for s in rated_stimuli(trial):
                score = scorer(key[s], crit, trial, versus)
                note("rate", trial.id, s, f"{crit}={score}")
                ratings.append({"trial": trial.id, "stimulus": s, "criterion": crit, "score": score, "t_ms": t})
        note("next", trial.id)
    note("export")
    doc: dict[str, Any] = {
        "format": "voxledger.submission/1", "packet_sha256": binding["packet_sha256"], "rater_id": manifest.rater_id,
        "token": binding["token"], "session_id": session, "user_agent": "simulated", "started_at": "2026-01-01T00:00:00.000Z",
        "finished_at": "2026-01-01T00:10:00.000Z", "ratings": ratings, "log": log,
    }  # fmt: skip
    doc["mac"] = submission_mac(doc, binding["token"])
    return doc


def write_json(path: Path, doc: dict[str, Any]) -> Path:
    """Write a submission the way the page does (indented JSON)."""
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path
