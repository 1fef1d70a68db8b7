"""A compact acoustic fingerprint for near-duplicate detection.

The clip is cut into 33 equal time segments (so the code ignores duration and sample rate) and
its band energies on 9 log-spaced bands (300-4000 Hz) are measured per segment; each bit is the
sign of the time-difference of adjacent band-energy differences (Haitsma-Kalker style), giving
32 x 8 = 256 bits. Gain changes, resampling and re-encoding leave nearly every bit unchanged;
different sentences differ in about half of them.

Candidates are found by locality-sensitive bucketing: the code is cut into 16 chunks of 16 bits,
and two codes with at most 15 differing bits must share one chunk exactly (pigeonhole), so
the search is linear in the corpus size instead of quadratic.
"""

from __future__ import annotations

import numpy as np

N_SEGMENTS = 33
BAND_EDGES_HZ = np.geomspace(300.0, 4000.0, 10)
N_CHUNKS = 16


def fingerprint(wav: np.ndarray, sample_rate_hz: int) -> bytes:
    """256-bit fingerprint of a mono clip (32 bytes); silence gives all zero bits."""
    x = np.asarray(wav, dtype=np.float64)
    if x.size < N_SEGMENTS * 64:
        x = np.pad(x, (0, N_SEGMENTS * 64 - x.size))
    seg = x.size // N_SEGMENTS
    frames = x[: seg * N_SEGMENTS].reshape(N_SEGMENTS, seg) * np.hanning(seg)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    freqs = np.fft.rfftfreq(seg, 1.0 / sample_rate_hz)
    bands = np.stack(
        [power[:, (freqs >= lo) & (freqs < hi)].sum(axis=1) for lo, hi in zip(BAND_EDGES_HZ[:-1], BAND_EDGES_HZ[1:])],
        axis=1,
    )
    energy = np.log(bands + 1e-12)
    diff = (energy[1:, :-1] - energy[1:, 1:]) - (energy[:-1, :-1] - energy[:-1, 1:])
    return np.packbits((diff > 0).ravel()).tobytes()


def hamming(a: bytes, b: bytes) -> int:
    """Number of differing bits."""
    return int(np.unpackbits(np.frombuffer(a, np.uint8) ^ np.frombuffer(b, np.uint8)).sum())


def near_duplicate_pairs(codes: dict[str, bytes], max_bits: int) -> list[tuple[str, str, int]]:
    """Pairs of ids whose fingerprints differ in at most ``max_bits`` (<= 15) bits, sorted."""
    if max_bits >= N_CHUNKS:
        raise ValueError(f"max_bits {max_bits} must be below {N_CHUNKS} for bucketed search")
    buckets: dict[tuple[int, bytes], list[str]] = {}
    chunk = 32 // N_CHUNKS
    for uid, code in codes.items():
        if not any(code):
            continue  # silent clips have no fingerprint; they are reported as silence instead
        for k in range(N_CHUNKS):
            buckets.setdefault((k, code[k * chunk : (k + 1) * chunk]), []).append(uid)
    pairs: dict[tuple[str, str], int] = {}
    for ids in buckets.values():
        if len(ids) < 2:
            continue
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                key = (a, b) if a < b else (b, a)
                if key not in pairs:
                    d = hamming(codes[a], codes[b])
                    if d <= max_bits:
                        pairs[key] = d
    return sorted((a, b, d) for (a, b), d in pairs.items())
