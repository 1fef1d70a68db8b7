"""The tiny vocoder's mel inversion gives librosa.util.nnls's result bit for bit, on its fast path and
on librosa's own (another scipy), for one block and for several (a clip over 819 frames)."""

from __future__ import annotations

import functools

import librosa
import numpy as np
import pytest

from voxledger.tasks.backends.tiny import audio
from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize


@functools.cache
def _mels() -> dict[str, np.ndarray]:
    speech = audio.log_mel(
        resample_synthesis(synthesize("Kick the ball straight and follow through.", voice="en-us", pitch=50), 16000).audio
    )
    # speech starts near its optimum; this spread takes L-BFGS-B 25 iterations, where every setting shows
    noise = (np.random.default_rng(0).standard_normal((40, audio.N_MELS)) * 3.5 - 4).astype(np.float32)
    return {"speech": speech, "noise": noise, "several blocks": np.tile(speech, (7, 1))}


@pytest.mark.parametrize("name", ["speech", "noise", "several blocks"])
def test_nnls_is_librosas_bit_for_bit(name: str) -> None:
    b = np.ascontiguousarray(np.exp(_mels()[name]).T)
    ours, theirs = audio.nnls(audio.mel_filterbank(), b), librosa.util.nnls(audio.mel_filterbank(), b)
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_where_scipys_routine_takes_other_arguments_it_is_librosas_own(monkeypatch: pytest.MonkeyPatch) -> None:
    def other_scipy(*_: object) -> np.ndarray:
        raise TypeError("setulb() takes 18 positional arguments but 17 were given")

    monkeypatch.setattr(audio, "_nonnegative_lbfgsb", other_scipy)
    b = np.ascontiguousarray(np.exp(_mels()["speech"]).T)
    assert np.array_equal(audio.nnls(audio.mel_filterbank(), b), librosa.util.nnls(audio.mel_filterbank(), b))
