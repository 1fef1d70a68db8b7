"""Signal checks on real espeak speech and on synthetic faults; BS.1770 loudness goldens."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import ValiditySpec
from voxledger.tasks.metrics.validity import (
    DBFS_FLOOR,
    _k_weighting,
    audio_stats,
    integrated_loudness,
    require_mono,
)

SR = 16_000
TEXT = "Open the window and let the fresh air into the room."


@pytest.fixture(scope="module")
def speech(speak: Callable[..., np.ndarray]) -> np.ndarray:
    return speak(TEXT)


def sine(freq_hz: float, seconds: float, sr: int, amplitude: float = 1.0) -> np.ndarray:
    return amplitude * np.sin(2 * np.pi * freq_hz * np.arange(round(seconds * sr)) / sr)


def test_k_weighting_matches_bs1770_table_at_48k() -> None:
    # ITU-R BS.1770-4, Annex 1, Tables 1 and 2 (pre-filter shelf, then RLB high-pass).
    b, a = _k_weighting(48_000)
    shelf_b = [1.53512485958697, -2.69169618940638, 1.19839281085285]
    shelf_a = [1.0, -1.69065929318241, 0.73248077421585]
    hp_a = [1.0, -1.99004745483398, 0.99007225036621]
    np.testing.assert_allclose(b, np.polymul(shelf_b, [1.0, -2.0, 1.0]), atol=1e-12)
    np.testing.assert_allclose(a, np.polymul(shelf_a, hp_a), atol=1e-12)


@pytest.mark.parametrize("sr", [48_000, 44_100, 22_050, 16_000])
def test_full_scale_997hz_sine_reads_minus_3_01_lufs(sr: int) -> None:
    # BS.1770-4: a 0 dBFS 997 Hz sine in one channel reads -3.01 LKFS.
    assert integrated_loudness(sine(997, 5.0, sr), sr) == pytest.approx(-3.01, abs=0.05)
    assert integrated_loudness(sine(997, 5.0, sr, 0.1), sr) == pytest.approx(-23.01, abs=0.05)


def test_loudness_needs_one_400ms_block() -> None:
    assert integrated_loudness(sine(997, 0.39, SR), SR) is None
    assert integrated_loudness(np.zeros(SR), SR) is None


def test_clean_speech_has_no_problems(speech: np.ndarray) -> None:
    stats = audio_stats(speech, SR, text=TEXT)
    assert stats.problems == ()
    assert stats.duration_s == pytest.approx(speech.size / SR)
    assert 0.05 < stats.silence_fraction < 0.6
    assert stats.text_chars == 41
    assert 8.0 < stats.chars_per_s < 25.0
    assert stats.loudness_lufs is not None and -40.0 < stats.loudness_lufs < -5.0


def test_silence_is_caught(speech: np.ndarray) -> None:
    stats = audio_stats(np.zeros(2 * SR, dtype=np.float32), SR)
    assert stats.problems == ("silent",)
    assert (stats.rms_dbfs, stats.silence_fraction, stats.loudness_lufs) == (DBFS_FLOOR, 1.0, None)
    padded = np.concatenate([np.zeros(SR // 2), speech, np.zeros(SR)])
    stats = audio_stats(padded, SR)
    assert stats.leading_silence_s == pytest.approx(0.5, abs=0.03)
    assert stats.trailing_silence_s == pytest.approx(1.0, abs=0.06)


def test_clipping_is_caught(speech: np.ndarray) -> None:
    clipped = np.clip(speech * 8.0, -1.0, 1.0)
    stats = audio_stats(clipped, SR)
    assert "clipped" in stats.problems and stats.clipping_fraction > 0.01
    lone_peaks = np.zeros(SR)
    lone_peaks[::100] = 1.0  # isolated full-scale samples are not runs
    assert audio_stats(lone_peaks, SR).clipping_fraction == 0.0


def test_dc_offset_is_caught(speech: np.ndarray) -> None:
    stats = audio_stats(speech * 0.5 + 0.1, SR)
    assert stats.problems == ("dc_offset",)
    assert stats.dc_offset == pytest.approx(0.1 + 0.5 * float(speech.mean()), abs=1e-6)


def test_speaking_rate_against_text(speech: np.ndarray) -> None:
    fast = audio_stats(speech[: SR // 2], SR, text=TEXT)
    slow = audio_stats(np.concatenate([speech] * 4), SR, text=TEXT)
    assert "too_fast" in fast.problems and "too_slow" in slow.problems
    ratio = audio_stats(speech, SR, text=TEXT).expected_duration_ratio
    assert ratio is not None and 0.6 < ratio < 1.6
    unpaced = audio_stats(speech, SR, text="?!")  # no letters: nothing to pace against
    assert (unpaced.text_chars, unpaced.chars_per_s, unpaced.problems) == (0, None, ())


def test_empty_and_non_finite_are_reported_not_raised() -> None:
    assert audio_stats(np.zeros(0), SR).problems == ("empty",)
    bad = np.full(SR, 0.1)
    bad[10] = np.nan
    assert "non_finite" in audio_stats(bad, SR).problems
    with pytest.raises(EvaluationError, match="1-D"):
        audio_stats(np.zeros((2, 10)), SR)


def test_stricter_spec_changes_the_verdict(speech: np.ndarray) -> None:
    strict = ValiditySpec(max_silence_fraction=0.01)
    assert "silent" in audio_stats(speech, SR, strict).problems


def test_require_mono() -> None:
    ok = require_mono(np.zeros(10, dtype=np.float64), SR, SR)
    assert ok.dtype == np.float32
    with pytest.raises(EvaluationError, match="22050 Hz; resample to 16000"):
        require_mono(np.zeros(10), 22_050, SR)
    with pytest.raises(EvaluationError, match="float"):
        require_mono(np.zeros(10, dtype=np.int16), SR)
    with pytest.raises(EvaluationError, match="peak 1.5000 exceeds 1.0"):
        require_mono(np.full(10, 1.5), SR, max_peak=1.0)


def test_ten_minutes_of_audio_are_measured_quickly() -> None:
    noise = (np.random.default_rng(0).standard_normal(600 * SR) * 0.1).astype(np.float32)
    start = time.perf_counter()
    audio_stats(noise, SR, text="x" * 9000)
    assert time.perf_counter() - start < 10.0  # 0.85 s measured on 2 shared cores (~1 ms per 4 s clip)


def _loudness_reference(wav: np.ndarray, sr: int) -> float | None:
    """BS.1770-4 as written: float64 direct-form K-weighting, every 400 ms block summed from scratch."""
    from scipy.signal import lfilter

    b, a = _k_weighting(sr)
    w = lfilter(b, a, np.asarray(wav, dtype=np.float64))
    block, step = round(0.4 * sr), round(0.1 * sr)
    z = np.array([np.mean(w[s : s + block] ** 2) for s in range(0, w.size - block + 1, step)])
    if z.size == 0:
        return None
    z = z[-0.691 + 10 * np.log10(np.maximum(z, 1e-30)) > -70]
    if z.size == 0:
        return None
    gate = -0.691 + 10 * np.log10(z.mean()) - 10
    return float(-0.691 + 10 * np.log10(z[-0.691 + 10 * np.log10(z) > gate].mean()))


@pytest.mark.parametrize("sr", [16_000, 22_050, 44_100])
def test_fast_loudness_and_rms_match_the_plain_float64_computation(speech: np.ndarray, sr: int) -> None:
    rng = np.random.default_rng(sr)
    clips = [
        speech.astype(np.float32),
        (0.05 * rng.standard_normal(3 * sr + 123)).astype(np.float32),  # a partial last frame and block
        np.concatenate([np.zeros(sr), 0.3 * rng.standard_normal(sr // 2)]).astype(np.float32),
    ]
    for clip in clips:
        ours, ref = integrated_loudness(clip, sr), _loudness_reference(clip, sr)
        assert ours is not None and ref is not None and abs(ours - ref) < 0.001
        stats = audio_stats(clip, sr)
        assert stats.rms_dbfs == pytest.approx(10 * np.log10(np.mean(clip.astype(np.float64) ** 2)), abs=1e-4)
        assert stats.peak == pytest.approx(float(np.max(np.abs(clip))))
        assert stats.dc_offset == pytest.approx(float(np.mean(clip.astype(np.float64))), abs=1e-9)
