"""Tiny synthetic corpora for the corpus tests: speech-shaped noise clips with distinct transcripts.

Clips are low-passed noise under a 3-5 Hz syllable envelope (peak 0.3), so the audit's signal
checks pass; each seed gives a different clip (no near duplicates). Transcripts hold about 15
letters per second, ordinary read speech, so the speaking-rate check passes too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import lfilter

from voxledger.schemas.audit import AuditPolicy, LeakageRule

WORDS = ("amber", "birch", "cedar", "delta", "ember", "fable", "grain", "harbor", "ivory", "jolly", "kettle", "lemon",
         "maple", "noble", "olive", "pearl", "quiet", "river", "stone", "tiger")  # fmt: skip
POLICY = AuditPolicy(name="corpus-test", leakage=(LeakageRule(key="speaker", partition=(("train", "dev"),)), LeakageRule(key="text_norm")))


def clip(seconds: float, seed: int, sample_rate_hz: int = 16000, channels: int = 1) -> np.ndarray:
    """``(frames, channels)`` float32 speech-shaped noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sample_rate_hz)
    t = np.arange(n) / sample_rate_hz
    x = lfilter([1.0], [1.0, -0.9], rng.standard_normal(n)) * (0.15 + 0.85 * np.abs(np.sin(np.pi * rng.uniform(3, 5) * t)))
    x = (x / np.abs(x).max() * 0.3).astype(np.float32)
    return np.repeat(x[:, None], channels, axis=1)


def write_clip(path: Path, seconds: float, seed: int, *, sample_rate_hz: int = 16000, channels: int = 1, fmt: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, clip(seconds, seed, sample_rate_hz, channels), sample_rate_hz, format=fmt)
    return path


def sentence(i: int, seconds: float = 1.5) -> str:
    """A distinct transcript of about 15 letters per second for clip ``i``."""
    n = max(2, round(seconds * 15 / 6))
    return " ".join(WORDS[(i // len(WORDS) ** k + k) % len(WORDS)] for k in range(n - 1)) + f" {WORDS[i % len(WORDS)]}"
