"""The signal predictors of the bot score (`robustness`): what a script that rates from the signal can compute.

Per stored WAV file: level, crest, pause floor, onset and quiet-frame kurtosis (the leak check's families,
`families`), the share of energy above 2 and 4 kHz and librosa-style spectral flatness, flux, roll-off and
centroid; and, where the stimuli came from an evaluation recorded in the home, the source clip's metrics.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

import numpy as np
import soundfile as sf

from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.trees import load_manifest
from voxledger.tasks.listening.families import Measure, level, onset, pause_floor, quiet_kurtosis
from voxledger.tasks.listening.verify import Packet

Features = dict[str, dict[str, float]]  # pseudonym -> predictor -> value


def spectral(x: np.ndarray, rate: int) -> dict[str, float]:
    """The share of energy above 2 and 4 kHz (the leak check's band family, from the frames); spectral flatness (power),
    95% roll-off and centroid (magnitude), as librosa defines them, averaged, and the flux
    (mean squared change of the log magnitude, logged) over 32 ms Hann frames (10 ms hop) within 20 dB of the loudest:
    the cheap quality proxies a script reaches for (tests/tasks/listening/bot.py uses flatness and flux)."""
    n_fft, hop = 1 << int(np.round(np.log2(rate * 0.032))), max(1, rate // 100)
    y = np.pad(x.astype(np.float64), n_fft // 2)
    if y.size < n_fft + hop:
        return dict.fromkeys(SPECTRAL, 0.0)
    frames = np.lib.stride_tricks.sliding_window_view(y, n_fft)[::hop] * np.hanning(n_fft)
    mag = np.abs(np.fft.rfft(frames, axis=1))
    rms = np.sqrt(np.mean(frames**2, axis=1))
    loud = rms > 0.1 * rms.max() if rms.max() > 0 else np.zeros(rms.size, dtype=bool)
    if loud.sum() < 2:
        return dict.fromkeys(SPECTRAL, 0.0)
    m = mag[loud]
    power = np.maximum(m**2, 1e-10)
    freqs = np.fft.rfftfreq(n_fft, 1 / rate)
    total = np.maximum(m.sum(axis=1), 1e-12)
    rolloff = freqs[np.argmax(np.cumsum(m, axis=1) >= 0.95 * total[:, None], axis=1)]
    flux = float(np.mean(np.sum(np.diff(np.log(m + 1e-6), axis=0) ** 2, axis=1)))
    energy = (mag**2).sum(axis=0)
    return {
        "energy_above_2khz": float(energy[freqs >= 2000].sum() / max(float(energy.sum()), 1e-12)),
        "energy_above_4khz": float(energy[freqs >= 4000].sum() / max(float(energy.sum()), 1e-12)),
        "spectral_flatness": float(np.log(np.mean(np.exp(np.mean(np.log(power), axis=1)) / np.mean(power, axis=1)) + 1e-12)),
        "spectral_flux": float(np.log(flux + 1e-12)),
        "spectral_rolloff": float(np.mean(rolloff)),
        "spectral_centroid": float(np.mean((m @ freqs) / total)),
    }


SPECTRAL: Final = ("energy_above_2khz", "energy_above_4khz", "spectral_flatness", "spectral_flux", "spectral_rolloff", "spectral_centroid")
SIGNAL_PREDICTORS: Final[dict[str, Measure]] = {
    "rms_dbfs": level("rms"),
    "crest_db": level("crest"),
    "pause_p10_10ms": pause_floor(10, 10.0),
    "onset_45_dbfs_10ms": onset(-45, 10.0),
    "quiet_kurtosis": quiet_kurtosis,
}


def packet_features(blobs: LocalBlobStore, packets: list[Packet], pseudonyms: set[str]) -> Features:
    """Every signal predictor of each file in ``pseudonyms``, read from the packets' stored trees."""
    out: Features = {}
    for p in packets:
        entries = {e.path: e.sha256 for e in load_manifest(blobs, p.tree_sha256).entries}
        for a in p.manifest.audio:
            if a.id in pseudonyms and a.file in entries:
                out[a.id] = file_features(blobs, entries[a.file])
    return out


_MEASURED: OrderedDict[str, dict[str, float]] = OrderedDict()
_MEASURED_LOCK = threading.Lock()
MEASURED_MAX: Final = 20_000
"""Files whose predictors a process keeps (by content digest, so never stale): aggregations of one packet set share them."""


def file_features(blobs: LocalBlobStore, sha256: str) -> dict[str, float]:
    """The signal predictors of one stored WAV file, memoised by its digest (under a lock: flows run in threads)."""
    with _MEASURED_LOCK:
        if sha256 in _MEASURED:
            _MEASURED.move_to_end(sha256)
            return dict(_MEASURED[sha256])
    x, rate = sf.read(io.BytesIO(blobs.get_bytes(sha256)), dtype="float64", always_2d=False)
    x = x.mean(axis=1) if x.ndim > 1 else x
    found = {name: float(f(x, rate)) for name, f in SIGNAL_PREDICTORS.items()} | spectral(x, rate)
    with _MEASURED_LOCK:
        _MEASURED[sha256] = found
        while len(_MEASURED) > MEASURED_MAX:
            _MEASURED.popitem(last=False)
    return dict(found)


def add_evaluation(
    features: Features, sources: Mapping[str, tuple[str, str]], observed: Mapping[tuple[str, str], dict[str, float]]
) -> None:
    """Add the evaluation's per-clip metrics (Whisper WER, CER, speaker similarity, DNSMOS...) of each file's source clip
    as ``evaluation_<metric>`` predictors, only metrics every file in ``features`` has (``sources``: pseudonym ->
    (candidate, prompt)); measured when the evaluation ran, so they cost nothing here."""
    per_file = {p: observed.get(sources[p], {}) for p in features if p in sources}
    if not per_file or len(per_file) < len(features):
        return
    common = set.intersection(*(set(m) for m in per_file.values()))
    for p, metrics in per_file.items():
        features[p] |= {f"evaluation_{m}": metrics[m] for m in sorted(common)}
