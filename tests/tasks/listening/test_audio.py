"""Blinding audio: BS.1770 loudness, plain PCM WAV, the MUSHRA low anchor, padding."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest
import soundfile as sf

from voxledger.schemas.errors import PacketError
from voxledger.tasks.listening import audio as au

RATE = 16000


def sine(freq_hz: float, amplitude: float, seconds: float = 3.0) -> np.ndarray:
    return amplitude * np.sin(2 * np.pi * freq_hz * np.arange(int(seconds * RATE)) / RATE)


def test_loudness_matches_bs1770_reference_tone() -> None:
    # BS.1770-4: a 0 dBFS 997 Hz sine reads -3.01 LKFS; the RBJ K-filter at 16 kHz gives -3.08 here
    assert au.integrated_loudness(sine(997, 1.0), RATE) == pytest.approx(-3.01, abs=0.1)
    assert au.integrated_loudness(sine(997, 0.1), RATE) - au.integrated_loudness(sine(997, 1.0), RATE) == pytest.approx(-20.0, abs=1e-6)
    # gating: blocks of pure silence are dropped, so 2 s or 10 s of trailing silence read the same
    # (the blocks straddling the tone's end do count: that is why packets are measured after padding)
    two, ten = (au.integrated_loudness(np.concatenate([sine(997, 0.1), np.zeros(s * RATE)]), RATE) for s in (2, 10))
    assert two == pytest.approx(ten, abs=1e-9) and -0.5 < two - au.integrated_loudness(sine(997, 0.1), RATE) < 0
    assert au.integrated_loudness(np.zeros(RATE), RATE) == au.SILENCE_LUFS


def test_common_target_respects_the_peak_ceiling() -> None:
    assert au.common_target([-20.0, -30.0], [-3.0, -20.0], -26.0, -1.0) == -26.0
    # the second clip would need +14 dB to reach -16 LUFS and would clip: everything is set lower
    assert au.common_target([-20.0, -30.0], [-3.0, -2.0], -16.0, -1.0) == -29.0


def test_pcm_wav_is_bare() -> None:
    data = au.encode_pcm16(sine(440, 0.5, 0.5), RATE)
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data"
    assert len(data) == 44 + 2 * RATE // 2 and b"LIST" not in data and b"INFO" not in data
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, RATE)


def test_low_anchor_removes_the_top_band() -> None:
    noise = np.random.default_rng(0).normal(0, 0.1, RATE * 2)
    spectrum = np.abs(np.fft.rfft(au.low_pass(noise, RATE, 3500.0))) ** 2
    freqs = np.fft.rfftfreq(noise.size, 1 / RATE)
    ratio_db = 10 * np.log10(spectrum[freqs > 4500].mean() / spectrum[freqs < 3000].mean())
    assert ratio_db < -40
    with pytest.raises(PacketError, match="Nyquist"):
        au.low_pass(noise, RATE, 9000.0)


def test_padding_rounds_up_to_the_bucket_and_never_shortens() -> None:
    assert au.padded_length(16001, RATE, 0.25) == 20000
    assert au.padded_length(16000, RATE, 0.25) == 16000
    assert au.pad(np.ones(10), 5).size == 10


def test_read_wav_refuses_wrong_rate_and_stereo() -> None:
    buf = io.BytesIO()
    sf.write(buf, np.zeros((100, 2)), 22050, format="WAV", subtype="PCM_16")
    with pytest.raises(PacketError, match="2 channel\\(s\\) at 22050 Hz; the protocol needs mono at 16000 Hz"):
        au.read_wav(buf.getvalue(), name="stimulus p1/a", sample_rate_hz=RATE)
    with pytest.raises(PacketError, match="not a readable WAV"):
        au.read_wav(b"RIFFjunk", name="stimulus p1/a", sample_rate_hz=RATE)
