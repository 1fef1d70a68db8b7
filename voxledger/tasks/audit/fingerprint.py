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

import functools
import itertools

import numpy as np

N_SEGMENTS = 33
BAND_EDGES_HZ = np.geomspace(300.0, 4000.0, 10)
N_CHUNKS = 16


@functools.lru_cache(maxsize=32)
def _plan(seg: int, sample_rate_hz: int) -> tuple[np.ndarray, int, np.ndarray]:
    """(window, FFT length, bin index where each band starts and the last one ends) for one segment length."""
    import scipy.fft  # imported when audio is fingerprinted, not when a cached audit loads this module

    n_fft = scipy.fft.next_fast_len(seg, real=True)
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sample_rate_hz)
    edges = np.searchsorted(freqs, BAND_EDGES_HZ, side="left")  # band k is bins [edges[k], edges[k+1])
    return np.hanning(seg).astype(np.float32), n_fft, edges


def fingerprint(wav: np.ndarray, sample_rate_hz: int) -> bytes:
    """256-bit fingerprint of a mono clip (32 bytes); silence gives all zero bits.

    Each segment is windowed and zero-padded to the next fast FFT length, in float32.
    """
    x = np.asarray(wav, dtype=np.float32)
    if x.size < N_SEGMENTS * 64:
        x = np.pad(x, (0, N_SEGMENTS * 64 - x.size))
    seg = x.size // N_SEGMENTS
    window, n_fft, edges = _plan(seg, sample_rate_hz)
    frames = x[: seg * N_SEGMENTS].reshape(N_SEGMENTS, seg) * window
    import scipy.fft

    spectrum = scipy.fft.rfft(frames, n=n_fft, axis=1)
    power = spectrum.real**2 + spectrum.imag**2
    if (np.diff(edges) > 0).all():  # every band holds a bin: one reduction over contiguous ranges
        bands = np.add.reduceat(power[:, : edges[-1]], edges[:-1], axis=1).astype(np.float64)
    else:  # very short clips: empty bands sum to zero
        cumulative = np.concatenate([np.zeros((N_SEGMENTS, 1)), np.cumsum(power, axis=1, dtype=np.float64)], axis=1)
        bands = cumulative[:, edges[1:]] - cumulative[:, edges[:-1]]
    energy = np.log(bands + 1e-12)
    diff = (energy[1:, :-1] - energy[1:, 1:]) - (energy[:-1, :-1] - energy[:-1, 1:])
    return np.packbits((diff > 0).ravel()).tobytes()


def hamming(a: bytes, b: bytes) -> int:
    """Number of differing bits."""
    return int(np.unpackbits(np.frombuffer(a, np.uint8) ^ np.frombuffer(b, np.uint8)).sum())


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def near_duplicate_pairs(codes: dict[str, bytes], max_bits: int) -> list[tuple[str, str, int]]:
    """Pairs of ids whose fingerprints differ in at most ``max_bits`` (<= 15) bits, sorted.

    Within each bucket the distances are computed as arrays (XOR and a popcount table), in row
    blocks, so a bucket of thousands of clips costs milliseconds, not a Python call per pair.
    """
    if max_bits >= N_CHUNKS:
        raise ValueError(f"max_bits {max_bits} must be below {N_CHUNKS} for bucketed search")
    ids = [uid for uid, code in codes.items() if any(code)]  # silent clips are reported as silence instead
    if len(ids) < 2:
        return []
    matrix = np.frombuffer(b"".join(codes[uid] for uid in ids), dtype=np.uint8).reshape(len(ids), -1)
    chunk = matrix.shape[1] // N_CHUNKS
    pairs: dict[tuple[str, str], int] = {}
    for k in range(N_CHUNKS):
        keys = matrix[:, k * chunk : (k + 1) * chunk].copy().view(np.dtype((np.void, chunk))).ravel()
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1], [True]]))
        for lo, hi in itertools.pairwise(starts):
            if hi - lo >= 2:
                _bucket_pairs(order[lo:hi], matrix, ids, max_bits, pairs)
    return sorted((a, b, d) for (a, b), d in pairs.items())


def _bucket_pairs(members: np.ndarray, matrix: np.ndarray, ids: list[str], max_bits: int, pairs: dict[tuple[str, str], int]) -> None:
    """Add every pair of ``members`` within ``max_bits`` of each other to ``pairs``."""
    codes = matrix[members]
    rows = max(1, 4_000_000 // (len(members) * codes.shape[1]))  # ~4 MB of XOR per block
    for start in range(0, len(members), rows):
        block = codes[start : start + rows]
        dist = _POPCOUNT[block[:, None, :] ^ codes[None, :, :]].sum(axis=2, dtype=np.int32)
        for i, j in zip(*np.nonzero(dist <= max_bits), strict=True):
            i_global, j_global = start + int(i), int(j)
            if i_global < j_global:
                a, b = ids[members[i_global]], ids[members[j_global]]
                pairs[(a, b) if a < b else (b, a)] = int(dist[i, j])
