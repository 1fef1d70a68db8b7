"""Audio for blinded packets: loudness (ITU-R BS.1770-4), anchors, gold items, plain PCM WAV.

Every clip a rater hears is rendered the same way: float mono at the protocol rate -> one gain
to a common integrated loudness -> optional trailing silence to a common length -> 16-bit PCM
in a bare RIFF/WAVE file (``fmt `` and ``data`` chunks only: no tags, no tool names, no dates).
"""

from __future__ import annotations

import io
import math
import wave

import numpy as np
import soundfile as sf

from voxledger.schemas.errors import PacketError

BLOCK_S = 0.4
BLOCK_STEP_S = 0.1
ABSOLUTE_GATE_LUFS = -70.0
RELATIVE_GATE_LU = -10.0
SILENCE_LUFS = -120.0


def read_wav(data: bytes, *, name: str, sample_rate_hz: int) -> np.ndarray:
    """Decode a mono WAV at ``sample_rate_hz`` to float64; PacketError names the stimulus otherwise."""
    try:
        audio, rate = sf.read(io.BytesIO(data), dtype="float64", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
        raise PacketError(f"{name}: audio is not a readable WAV file ({exc})") from exc
    if audio.shape[1] != 1 or rate != sample_rate_hz:
        raise PacketError(f"{name}: audio is {audio.shape[1]} channel(s) at {rate} Hz; the protocol needs mono at {sample_rate_hz} Hz")
    if audio.shape[0] == 0 or not np.isfinite(audio).all():
        raise PacketError(f"{name}: audio is empty or holds NaN/Inf samples")
    out: np.ndarray = audio[:, 0]
    return out


def _biquad_high_shelf(rate: int, gain_db: float, q: float, fc: float) -> tuple[np.ndarray, np.ndarray]:
    a = 10 ** (gain_db / 40)
    w0 = 2 * math.pi * fc / rate
    alpha, cw = math.sin(w0) / (2 * q), math.cos(w0)
    sa = 2 * math.sqrt(a) * alpha
    b = [a * ((a + 1) + (a - 1) * cw + sa), -2 * a * ((a - 1) + (a + 1) * cw), a * ((a + 1) + (a - 1) * cw - sa)]
    den = [(a + 1) - (a - 1) * cw + sa, 2 * ((a - 1) - (a + 1) * cw), (a + 1) - (a - 1) * cw - sa]
    return np.array(b) / den[0], np.array(den) / den[0]


def _biquad_high_pass(rate: int, q: float, fc: float) -> tuple[np.ndarray, np.ndarray]:
    w0 = 2 * math.pi * fc / rate
    alpha, cw = math.sin(w0) / (2 * q), math.cos(w0)
    b = [(1 + cw) / 2, -(1 + cw), (1 + cw) / 2]
    den = [1 + alpha, -2 * cw, 1 - alpha]
    return np.array(b) / den[0], np.array(den) / den[0]


def k_weight(audio: np.ndarray, rate: int) -> np.ndarray:
    """BS.1770 K-weighting: a +4 dB high shelf (1.5 kHz) then a 38 Hz high-pass (RBJ biquads)."""
    from scipy.signal import lfilter  # scipy.signal: imported where a packet's audio is filtered, not by every packets command

    b1, a1 = _biquad_high_shelf(rate, 4.0, 1 / math.sqrt(2), 1500.0)
    b2, a2 = _biquad_high_pass(rate, 0.5, 38.0)
    out: np.ndarray = lfilter(b2, a2, lfilter(b1, a1, audio))
    return out


def integrated_loudness(audio: np.ndarray, rate: int) -> float:
    """Gated integrated loudness in LUFS (400 ms blocks, 75 % overlap, -70 LUFS and -10 LU gates).

    A clip shorter than one block is measured as a single block; silence returns -120 LUFS.
    """
    weighted = k_weight(audio, rate)
    size, step = int(BLOCK_S * rate), int(BLOCK_STEP_S * rate)
    if weighted.size <= size:
        powers = np.array([np.mean(weighted**2)])
    else:
        starts = np.arange(0, weighted.size - size + 1, step)
        csum = np.concatenate([[0.0], np.cumsum(weighted**2)])
        powers = (csum[starts + size] - csum[starts]) / size
    with np.errstate(divide="ignore"):
        block_lufs = -0.691 + 10 * np.log10(powers)
    kept = powers[block_lufs > ABSOLUTE_GATE_LUFS]
    if kept.size == 0:
        return SILENCE_LUFS
    relative = -0.691 + 10 * math.log10(float(kept.mean())) + RELATIVE_GATE_LU
    kept = powers[block_lufs > max(relative, ABSOLUTE_GATE_LUFS)]
    return -0.691 + 10 * math.log10(float(kept.mean()))


def peak_dbfs(audio: np.ndarray) -> float:
    """Sample peak in dBFS (-inf for digital silence)."""
    peak = float(np.max(np.abs(audio)))
    return 20 * math.log10(peak) if peak > 0 else -math.inf


def common_target(loudness: list[float], peaks: list[float], target_lufs: float, ceiling_dbfs: float) -> float:
    """The one loudness every clip is set to: the target, lowered so no clip's peak passes the ceiling."""
    headroom = [lu + (ceiling_dbfs - pk) for lu, pk in zip(loudness, peaks, strict=True) if lu > SILENCE_LUFS]
    return min([target_lufs, *headroom])


def set_loudness(audio: np.ndarray, measured_lufs: float, target_lufs: float) -> np.ndarray:
    """Apply the gain that moves ``measured_lufs`` to ``target_lufs`` (silence stays silent)."""
    if measured_lufs <= SILENCE_LUFS:
        return audio
    return audio * 10 ** ((target_lufs - measured_lufs) / 20)


def low_pass(audio: np.ndarray, rate: int, cutoff_hz: float) -> np.ndarray:
    """Zero-phase 8th-order Butterworth low-pass (the MUSHRA 3.5 kHz anchor)."""
    if cutoff_hz >= rate / 2:
        raise PacketError(f"low-pass cutoff {cutoff_hz} Hz is at or above Nyquist ({rate / 2} Hz); lower it")
    from scipy.signal import butter, sosfiltfilt

    out: np.ndarray = sosfiltfilt(butter(8, cutoff_hz, fs=rate, output="sos"), audio)
    return out


def high_pass(audio: np.ndarray, rate: int, cutoff_hz: float) -> np.ndarray:
    """DC removed, then a zero-phase Butterworth high-pass (2nd order run forward and back: 24 dB/octave)."""
    from scipy.signal import butter, sosfiltfilt

    centred = audio - float(np.mean(audio))
    out: np.ndarray = sosfiltfilt(butter(2, cutoff_hz, btype="highpass", fs=rate, output="sos"), centred)
    return out


FRAME_S = 0.01
FADE_S = 0.005


def speech_bounds(audio: np.ndarray, rate: int, threshold_db: float) -> tuple[int, int]:
    """First and one-past-last sample of the 10 ms frames within ``threshold_db`` of the loudest frame."""
    frame = max(1, round(FRAME_S * rate))
    n = audio.size // frame
    if n == 0:
        return 0, audio.size
    power = np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1)
    if not np.any(power > 0):
        return 0, audio.size
    with np.errstate(divide="ignore"):
        level = 10 * np.log10(power / power.max())
    loud = np.flatnonzero(level > threshold_db)
    return int(loud[0]) * frame, min(audio.size, (int(loud[-1]) + 1) * frame)


def trim_silence(audio: np.ndarray, rate: int, threshold_db: float, lead_s: float) -> np.ndarray:
    """The speech between ``speech_bounds`` with 5 ms raised-cosine fades, after ``lead_s`` of digital silence.

    Every clip then starts the same way whatever silence (or noise, or DC) its source began with.
    """
    start, end = speech_bounds(audio, rate, threshold_db)
    core = audio[start:end].copy()
    fade = min(round(FADE_S * rate), core.size // 2)
    if fade:
        ramp = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, fade))
        core[:fade] *= ramp
        core[-fade:] *= ramp[::-1]
    return np.concatenate([np.zeros(round(lead_s * rate)), core])


def fractional_delay(audio: np.ndarray, rate: int, delay_samples: float) -> np.ndarray:
    """``audio`` delayed by a (sub-)sample amount, as a linear phase shift (circular: clips end in silence)."""
    spectrum = np.fft.rfft(audio)
    freqs = np.fft.rfftfreq(audio.size, 1 / rate)
    return np.fft.irfft(spectrum * np.exp(-2j * np.pi * freqs * delay_samples / rate), n=audio.size)


def padded_length(samples: int, rate: int, bucket_s: float) -> int:
    """``samples`` rounded up to a whole number of ``bucket_s`` buckets."""
    bucket = max(1, round(bucket_s * rate))
    return -(-samples // bucket) * bucket


def pad(audio: np.ndarray, samples: int) -> np.ndarray:
    """Trailing silence up to ``samples`` (never shortens)."""
    return np.concatenate([audio, np.zeros(max(0, samples - audio.size))])


def to_pcm16(audio: np.ndarray) -> np.ndarray:
    """Float samples (full scale 1.0) rounded to clipped 16-bit integers."""
    return np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2")


def encode_int16(pcm: np.ndarray, rate: int) -> bytes:
    """A bare 16-bit PCM mono WAV of integer samples (44-byte header, no metadata chunks)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


def encode_pcm16(audio: np.ndarray, rate: int) -> bytes:
    """A bare 16-bit PCM mono WAV (44-byte header, no metadata chunks)."""
    return encode_int16(to_pcm16(audio), rate)
