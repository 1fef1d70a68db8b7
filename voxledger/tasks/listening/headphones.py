"""The Huggins-pitch headphone screen (Milne, Bianco, Poole, Zhao, Oxenham, Billig and Chait 2021,
"An online headphone screening test based on dichotic pitch", Behavior Research Methods 53).

One trial is a stereo file of three bursts of white noise separated by silence. Two bursts are
diotic (the same noise in both ears); in the target burst the right ear's noise has a narrow band
around ``centre_hz`` phase-inverted. Over headphones the interaural phase difference in that
band is heard as a faint tone; over loudspeakers the two channels mix in the room and there is
nothing to hear. Every burst has the same spectrum and level in each ear, so nothing but the
binaural cue tells the target apart (checked in the tests).
"""

from __future__ import annotations

import io
import wave

import numpy as np

from voxledger.schemas.listening import HeadphoneCheck

RAMP_S = 0.02  # raised-cosine onset and offset of each burst
LEVEL_DBFS = -24.0  # RMS of each burst per channel


def huggins_burst(check: HeadphoneCheck, rate_hz: int, rng: np.random.Generator, *, target: bool) -> np.ndarray:
    """One burst as (samples, 2): white noise, with the band phase-inverted in the right ear when ``target``."""
    n = round(check.burst_s * rate_hz)
    left = rng.standard_normal(n)
    spectrum = np.fft.rfft(left)
    if target:
        freqs = np.fft.rfftfreq(n, 1 / rate_hz)
        band = np.abs(freqs - check.centre_hz) <= check.centre_hz * check.band_fraction
        spectrum[band] *= -1
    right = np.fft.irfft(spectrum, n)
    ramp = np.ones(n)
    k = round(RAMP_S * rate_hz)
    ramp[:k] = ramp[-k:][::-1] = 0.5 - 0.5 * np.cos(np.pi * np.arange(k) / k)
    gain = 10 ** (LEVEL_DBFS / 20) / np.sqrt(np.mean(left**2))
    out: np.ndarray = np.stack([left, right], axis=1) * ramp[:, None] * gain
    return out


def huggins_trial(check: HeadphoneCheck, rate_hz: int, seed: int, answer: int) -> np.ndarray:
    """Three bursts (the ``answer``-th, 1 to 3, holds the Huggins pitch) and the gaps between them, as (samples, 2)."""
    rng = np.random.default_rng(seed)
    gap = np.zeros((round(check.gap_s * rate_hz), 2))
    parts: list[np.ndarray] = []
    for i in (1, 2, 3):
        parts += [gap] * (i > 1) + [huggins_burst(check, rate_hz, rng, target=i == answer)]
    return np.concatenate(parts)


def encode_stereo(audio: np.ndarray, rate_hz: int) -> bytes:
    """A bare 16-bit PCM stereo WAV of float samples (full scale 1.0)."""
    pcm = np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()
