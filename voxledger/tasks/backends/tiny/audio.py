"""Audio front end and vocoder of the tiny backend: 16 kHz log-mel in, Griffin-Lim audio out.

Features are 80-bin log-mel frames of the magnitude STFT (n_fft 1024, hop 256, Hann window,
centred frames, so a clip of N samples has ``1 + N // 256`` frames). The model works on per-bin
normalised features; the statistics come from the training data and travel with the model
(`NormStats`), never from a global constant.

The vocoder inverts the mel filterbank by non-negative least squares (`librosa.util.nnls`, run by `nnls`) and
runs fast Griffin-Lim (momentum 0.99) from a phase drawn with a fixed seed, so the same mel and seed
give the same samples bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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
        magnitudes, floored at 1e-5; the same bytes whatever number of threads BLAS has.
    """
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim != 1:
        raise ValueError(f"log_mel expects a 1-D waveform, got shape {wave.shape}; pass one channel")
    spec = np.abs(librosa.stft(wave, n_fft=N_FFT, hop_length=HOP_LENGTH, window="hann", center=True))
    # einsum's own loops, not BLAS: a BLAS matmul splits its sums by the machine's thread count (OPENBLAS_NUM_THREADS),
    # so the same clip gave other bytes on another machine, or beside another process (test_audio.py)
    mel = np.einsum("mf,ft->mt", mel_filterbank(), spec, optimize=False)
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


def _nnls_objective(x: np.ndarray, shape: tuple[int, ...], a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
    """librosa's NNLS objective and gradient (``librosa.util._nnls._nnls_obj``), the same operations."""
    x = x.reshape(shape)
    diff = np.einsum("mf,...ft->...mt", a, x, optimize=True) - b
    value = (1 / b.size) * 0.5 * np.sum(diff**2)
    grad = (1 / b.size) * np.einsum("mf,...mt->...ft", a, diff, optimize=True)
    return value, grad.flatten()


def _nonnegative_lbfgsb(a: np.ndarray, b: np.ndarray, x_init: np.ndarray) -> np.ndarray:
    """The L-BFGS-B run ``scipy.optimize.fmin_l_bfgs_b`` makes for ``librosa.util.nnls`` (bounds
    ``(0, None)`` per variable, ``m`` = columns of ``a``, scipy's default tolerances), driving scipy's
    own ``setulb`` with the bound arrays built at once. scipy's wrapper converts the bound list one
    variable at a time in Python, which was over half of this vocoder's time; the iterates, and so
    the result, are the same bit for bit (tests/tasks/backends/test_tiny_vocoder_nnls.py)."""
    from scipy.optimize import _lbfgsb  # the compiled routine behind fmin_l_bfgs_b

    eps = np.finfo(float).eps
    m, factr, pgtol, maxls, max_steps = a.shape[1], (1e7 * eps) / eps, 1e-5, 20, 15000
    shape = x_init.shape
    x0 = np.asarray(x_init).ravel()
    n = x0.size
    x0 = np.clip(x0, np.zeros(n), np.full(n, np.inf))
    nbd = np.ones(n, np.int32)  # 1: a lower bound only
    low_bnd, upper_bnd = np.zeros(n, np.float64), np.zeros(n, np.float64)
    last_x, (last_f, last_g) = x0.astype(np.float64), _nnls_objective(np.copy(x0), shape, a, b)
    nfev = 1
    x = np.array(x0, dtype=np.float64)
    f: Any = np.array(0.0, dtype=np.float64)  # then the objective's float
    g = np.zeros((n,), dtype=np.float64)
    wa = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m, np.float64)
    iwa = np.zeros(3 * n, dtype=np.int32)
    task, ln_task = np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32)
    lsave, isave, dsave = np.zeros(4, dtype=np.int32), np.zeros(44, dtype=np.int32), np.zeros(29, dtype=np.float64)
    iterations = 0
    while True:
        g = g.astype(np.float64)
        _lbfgsb.setulb(m, x, low_bnd, upper_bnd, nbd, f, g, factr, pgtol, wa, iwa, task, lsave, isave, dsave, maxls, ln_task)
        if task[0] == 3:  # f and g wanted at x (evaluated again only when x moved, as scipy's ScalarFunction does)
            if not np.array_equal(x, last_x):
                last_x = x.astype(np.float64)
                last_f, last_g = _nnls_objective(np.copy(last_x), shape, a, b)
                nfev += 1
            f, g = last_f, np.atleast_1d(last_g)
        elif task[0] == 1:  # a new iteration
            iterations += 1
            if iterations >= max_steps:
                task[0], task[1] = 5, 504
            elif nfev > max_steps:
                task[0], task[1] = 5, 502
        else:
            break
    return x.reshape(shape)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``librosa.util.nnls(a, b)`` for a 2-D ``b``, bit for bit, in a fraction of the time (see
    `_nonnegative_lbfgsb`); librosa's own when this scipy's ``setulb`` is not the one it drives."""
    if b.ndim != 2:
        return librosa.util.nnls(a, b)
    try:
        from librosa.util.utils import MAX_MEM_BLOCK

        n_columns = max(int(MAX_MEM_BLOCK // (np.prod(b.shape[:-1]) * a.itemsize)), 1)
        if b.shape[-1] <= n_columns:
            x_init = np.einsum("fm,...mt->...ft", np.linalg.pinv(a), b, optimize=True)
            np.clip(x_init, 0, None, out=x_init)
            return _nonnegative_lbfgsb(a, b, x_init).astype(a.dtype)
        x: np.ndarray = np.einsum("fm,...mt->...ft", np.linalg.pinv(a), b, optimize=True)
        np.clip(x, 0, None, out=x)
        x_init = x
        for start in range(0, x.shape[-1], n_columns):
            stop = min(start + n_columns, b.shape[-1])
            x[..., start:stop] = _nonnegative_lbfgsb(a, b[..., start:stop], x_init[..., start:stop])
        return x
    except (ImportError, AttributeError, TypeError):  # another scipy: its private routine differs
        out: np.ndarray = librosa.util.nnls(a, b)
        return out


def mel_to_magnitude(mel_log: np.ndarray, power: float = MAGNITUDE_POWER) -> np.ndarray:
    """Approximate linear magnitudes ``(513, T)`` from log-mel frames ``(T, 80)``."""
    mel = np.exp(np.asarray(mel_log, dtype=np.float32)).T
    linear = np.maximum(nnls(mel_filterbank(), mel), 0.0)
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
