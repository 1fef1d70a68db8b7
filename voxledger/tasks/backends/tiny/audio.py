"""Audio front end and vocoder of the tiny backend: 16 kHz log-mel in, Griffin-Lim audio out.

Features are 80-bin log-mel frames of the magnitude STFT (n_fft 1024, hop 256, Hann window,
centred frames, so a clip of N samples has ``1 + N // 256`` frames). The model works on per-bin
normalised features; the statistics come from the training data and travel with the model
(`NormStats`), never from a global constant.

The vocoder inverts the mel filterbank by non-negative least squares (`librosa.util.nnls`) and
runs fast Griffin-Lim (momentum 0.99) from a phase drawn with a fixed seed, so the same mel and seed
give the same samples bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import librosa
import numpy as np

SAMPLE_RATE_HZ = 16_000
N_FFT = 1024
HOP_LENGTH = 256
N_MELS = 80
LOG_FLOOR = 1e-5
GRIFFIN_LIM_ITERS = 32
GRIFFIN_LIM_MOMENTUM = 0.99
# Mel inversion, Whisper tiny.en WER (pooled, 32 Griffin-Lim iterations, seed 0), demo voice spk-b1:
#   60 real espeak clips (unvocoded: 0.253): pseudo-inverse ^1.15 0.276, NNLS ^1.0 0.226, NNLS ^1.15 0.276;
#   base model output on the 60 test sentences: pseudo-inverse ^1.15 0.399, NNLS ^1.0 0.347,
#   NNLS ^1.15 0.399, NNLS ^1.3 0.380. NNLS costs ~0.25 s more per 2 s clip.
MAGNITUDE_POWER = 1.0
PEAK_LEVEL = 0.9


@lru_cache(maxsize=1)
def mel_filterbank() -> np.ndarray:
    """The (80, 513) Slaney mel filterbank for 16 kHz, 0-8 kHz, as float32."""
    return librosa.filters.mel(sr=SAMPLE_RATE_HZ, n_fft=N_FFT, n_mels=N_MELS, fmin=0.0, fmax=SAMPLE_RATE_HZ / 2).astype(np.float32)


def frame_count(n_samples: int) -> int:
    """Number of feature frames `log_mel` yields for a clip of ``n_samples`` samples."""
    return 1 + n_samples // HOP_LENGTH


def log_mel(wave: np.ndarray) -> np.ndarray:
    """Log-mel features of a mono 16 kHz clip.

    Args:
        wave: 1-D float array of samples at 16 kHz.

    Returns:
        float32 array of shape ``(frame_count(len(wave)), 80)``: natural log of the mel
        magnitudes, floored at 1e-5.
    """
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim != 1:
        raise ValueError(f"log_mel expects a 1-D waveform, got shape {wave.shape}; pass one channel")
    spec = np.abs(librosa.stft(wave, n_fft=N_FFT, hop_length=HOP_LENGTH, window="hann", center=True))
    mel = mel_filterbank() @ spec
    out: np.ndarray = np.log(np.maximum(mel, LOG_FLOOR)).T.astype(np.float32)
    return out


@dataclass(frozen=True)
class NormStats:
    """Per-bin mean and standard deviation of training log-mels (each shape ``(80,)``)."""

    mean: np.ndarray
    std: np.ndarray

    def normalize(self, mel: np.ndarray) -> np.ndarray:
        """Map log-mel frames ``(T, 80)`` to zero mean, unit variance per bin."""
        out: np.ndarray = ((mel - self.mean) / self.std).astype(np.float32)
        return out

    def denormalize(self, mel: np.ndarray) -> np.ndarray:
        """Inverse of `normalize`."""
        out: np.ndarray = (mel * self.std + self.mean).astype(np.float32)
        return out


def compute_norm_stats(mels: Iterable[np.ndarray], min_std: float = 1e-3) -> NormStats:
    """Per-bin statistics over every frame of ``mels`` (each ``(T, 80)`` log-mel).

    Raises:
        ValueError: when no frames are given.
    """
    total = np.zeros(N_MELS, dtype=np.float64)
    total_sq = np.zeros(N_MELS, dtype=np.float64)
    count = 0
    for mel in mels:
        total += mel.sum(axis=0)
        total_sq += np.square(mel, dtype=np.float64).sum(axis=0)
        count += mel.shape[0]
    if count == 0:
        raise ValueError("compute_norm_stats got no frames; pass at least one training clip")
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    return NormStats(mean=mean.astype(np.float32), std=np.maximum(std, min_std).astype(np.float32))


def mel_to_magnitude(mel_log: np.ndarray, power: float = MAGNITUDE_POWER) -> np.ndarray:
    """Approximate linear magnitudes ``(513, T)`` from log-mel frames ``(T, 80)``."""
    mel = np.exp(np.asarray(mel_log, dtype=np.float32)).T
    linear = np.maximum(librosa.util.nnls(mel_filterbank(), mel), 0.0)
    out: np.ndarray = np.power(linear, power, dtype=np.float32)
    return out


def vocode(
    mel_log: np.ndarray,
    seed: int,
    n_iter: int = GRIFFIN_LIM_ITERS,
    momentum: float = GRIFFIN_LIM_MOMENTUM,
    power: float = MAGNITUDE_POWER,
) -> np.ndarray:
    """Griffin-Lim audio for log-mel frames ``(T, 80)``; deterministic for a given ``seed``.

    Returns:
        float32 samples at 16 kHz, ``(T - 1) * 256`` long, peak-normalised to 0.9 (silence stays
        silence).
    """
    magnitude = mel_to_magnitude(mel_log, power)
    wave = librosa.griffinlim(
        magnitude,
        n_iter=n_iter,
        hop_length=HOP_LENGTH,
        win_length=N_FFT,
        n_fft=N_FFT,
        window="hann",
        center=True,
        momentum=momentum,
        init="random",
        random_state=np.random.default_rng(seed),
        length=(magnitude.shape[1] - 1) * HOP_LENGTH,
    ).astype(np.float32)
    peak = float(np.max(np.abs(wave))) if wave.size else 0.0
    if peak > 0.0:
        wave = wave * np.float32(PEAK_LEVEL / peak)
    return wave
