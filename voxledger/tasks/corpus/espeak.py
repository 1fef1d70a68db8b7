"""espeak-ng speech synthesis with free phoneme alignments, deterministic to the sample.

The C library (libespeak-ng from the ``espeakng-loader`` wheel) reports each phoneme's start
sample while it synthesizes, so every utterance comes with an exact phoneme alignment. The library
is not thread safe and keeps state between utterances, so it runs in a helper process that serves
each call from a fork of its pristine, freshly initialized state (see ``_espeak_native``); one
global lock serializes calls. The same call therefore returns identical samples every time, in
any process.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from functools import cache
from importlib import resources
from math import gcd
from typing import IO, Any

import numpy as np

from voxledger.schemas.errors import SynthesisError
from voxledger.tasks.corpus._espeak_native import REPLY_HEAD

NATIVE_SAMPLE_RATE_HZ = 22_050
LEADING_SILENCE = "_"
# espeak starts a vowel-initial utterance at sample 0 with no silence before it; a fixed 20 ms of
# zeros before every utterance gives each one a real leading-silence segment.
LEADING_SILENCE_SAMPLES = 441
PITCH_RANGE = (0, 99)
RATE_WPM_RANGE = (80, 450)


@dataclass(frozen=True)
class PhonemeSegment:
    """One phoneme (espeak-ng mnemonic, stress marks kept) over samples [start, end)."""

    phoneme: str
    start_sample: int
    end_sample: int


@dataclass(frozen=True)
class Synthesis:
    """Float32 mono audio in [-1, 1] and its phonemes, contiguous over [0, len(audio)).

    The first phoneme is always the leading-silence token ``"_"``: 20 ms of zeros
    (``LEADING_SILENCE_SAMPLES``) added before espeak's own output, plus whatever silence espeak
    produced before its first phoneme.
    """

    audio: np.ndarray
    sample_rate_hz: int
    phonemes: list[PhonemeSegment]


class _Helper:
    """The helper process that owns libespeak-ng; restarted after a crash or a fork."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid = 0

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        """The helper's (stdin, stdout), starting it if needed (first call, after a crash, or
        in a forked child, which must not share its parent's helper)."""
        proc = self._proc
        if proc is None or self._owner_pid != os.getpid() or proc.poll() is not None:
            cmd = [sys.executable, "-m", "voxledger.tasks.corpus._espeak_native"]
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self._proc, self._owner_pid = proc, os.getpid()
        if proc.stdin is None or proc.stdout is None:
            raise SynthesisError("the espeak-ng helper process has no pipes")
        return proc.stdin, proc.stdout

    def call(self, request: dict[str, Any]) -> bytes:
        """Send one request, return the ok body; raise SynthesisError on an error reply."""
        with self.lock:
            try:
                stdin, stdout = self._pipes()
                stdin.write(json.dumps(request).encode() + b"\n")
                stdin.flush()
                kind, length = REPLY_HEAD.unpack(_read_exact(stdout, REPLY_HEAD.size))
                body = _read_exact(stdout, length)
            except (OSError, EOFError) as exc:
                self._discard()
                raise SynthesisError(f"the espeak-ng helper process stopped ({exc}); its stderr above says why") from exc
        if kind != b"K":
            raise SynthesisError(f"espeak-ng failed for {request}: {body.decode()}")
        return body

    def _discard(self) -> None:
        """Forget a helper whose stream is broken, ending it if this process started it."""
        proc, self._proc = self._proc, None
        if proc is not None and self._owner_pid == os.getpid() and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        """Stop the helper (it exits when its stdin closes); only the process that started it."""
        proc, self._proc = self._proc, None
        if proc is not None and self._owner_pid == os.getpid() and proc.stdin is not None:
            proc.stdin.close()
            proc.wait(timeout=10)


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"expected {n} bytes from the helper, got {len(data)}")
    return data


HELPERS = 2  # at most this many helper processes serve concurrent callers (one thread uses one)
_POOL: queue.LifoQueue[_Helper] = queue.LifoQueue()
for _ in range(HELPERS):
    _POOL.put(_Helper())
_ALL = list(_POOL.queue)
for _helper in _ALL:
    atexit.register(_helper.close)


def _call(request: dict[str, Any]) -> bytes:
    """One request on a free helper; the most recently used one first, so a single caller thread
    only ever starts one helper process, and two threads (`build_demo_corpus`) get one each."""
    helper = _POOL.get()
    try:
        return helper.call(request)
    finally:
        _POOL.put(helper)


def espeak_info() -> dict[str, Any]:
    """Library version string and native sample rate, e.g. ``{"version": "1.52.0 ..."}``."""
    info: dict[str, Any] = json.loads(_call({"op": "info"}))
    return info


def synthesize(text: str, voice: str = "en-us", pitch: int = 50, rate_wpm: int = 175) -> Synthesis:
    """Speak ``text`` with an espeak-ng voice (``"en-us"``, ``"en+f2"``, ``"en-gb+m7"``, ...).

    Returns 22,050 Hz audio and its phoneme segments. Raises ValueError for empty text or a
    pitch/rate outside espeak's range, SynthesisError for an unknown voice or a library failure.
    """
    if not text.strip():
        raise ValueError("text is empty: give at least one word to speak")
    if not PITCH_RANGE[0] <= pitch <= PITCH_RANGE[1]:
        raise ValueError(f"pitch {pitch} is outside espeak's range {PITCH_RANGE}")
    if not RATE_WPM_RANGE[0] <= rate_wpm <= RATE_WPM_RANGE[1]:
        raise ValueError(f"rate_wpm {rate_wpm} is outside espeak's range {RATE_WPM_RANGE}")
    request = {"text": text, "voice": voice, "pitch": pitch, "rate_wpm": rate_wpm}
    body = _call(request)
    (header_len,) = struct.unpack_from("<I", body)
    events = json.loads(body[4 : 4 + header_len])["events"]
    pcm = np.frombuffer(body[4 + header_len :], dtype="<i2")
    if pcm.size == 0:
        raise SynthesisError(f"espeak-ng returned no audio for {request}")
    audio = np.zeros(LEADING_SILENCE_SAMPLES + pcm.size, dtype=np.float32)
    audio[LEADING_SILENCE_SAMPLES:] = pcm.astype(np.float32) / 32768.0
    names = [LEADING_SILENCE] + [name for name, _ in events]
    starts = [0] + [LEADING_SILENCE_SAMPLES + sample for _, sample in events]
    return Synthesis(audio, NATIVE_SAMPLE_RATE_HZ, _contiguous(names, starts, audio.size, request))


def _contiguous(names: list[str], starts: list[int], n_samples: int, context: object) -> list[PhonemeSegment]:
    """Segments from start positions: each ends where the next begins, the last at the end.

    Starts are clamped into [0, n_samples] and made non-decreasing; segments left empty (a
    phoneme espeak reports but never sounds, such as its final ``"_"`` at the very end) are
    dropped, which keeps the rest contiguous.
    """
    bounded: list[int] = []
    for start in starts:
        bounded.append(min(max(start, bounded[-1] if bounded else 0), n_samples))
    ends = bounded[1:] + [n_samples]
    segments = [PhonemeSegment(name, start, end) for name, start, end in zip(names, bounded, ends, strict=True) if end > start]
    if not segments or segments[0].phoneme != LEADING_SILENCE:
        raise SynthesisError(f"no leading silence before the first phoneme for {context}")
    return segments


def resample_synthesis(s: Synthesis, sample_rate_hz: int) -> Synthesis:
    """Resample audio with ``scipy.signal.resample_poly`` and rescale phoneme boundaries.

    Boundaries are mapped to the nearest sample at the new rate and stay contiguous over the new
    length; a segment shorter than one new sample would vanish and is dropped. Audio is clipped
    to [-1, 1] (polyphase filtering can overshoot slightly).
    """
    from scipy.signal import resample_poly

    if sample_rate_hz <= 0:
        raise ValueError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
    if sample_rate_hz == s.sample_rate_hz:
        return s
    g = gcd(sample_rate_hz, s.sample_rate_hz)
    up, down = sample_rate_hz // g, s.sample_rate_hz // g
    audio = np.clip(resample_poly(s.audio.astype(np.float64), up, down), -1.0, 1.0)
    n_samples = audio.size
    starts = [(2 * seg.start_sample * up + down) // (2 * down) for seg in s.phonemes]
    names = [seg.phoneme for seg in s.phonemes]
    phonemes = _contiguous(names, starts, n_samples, f"resampling to {sample_rate_hz} Hz")
    return Synthesis(audio.astype(np.float32), sample_rate_hz, phonemes)


LANGUAGE_INVENTORIES: dict[str, str] = {"zh": "data/phoneme_inventory_zh.json"}
"""Languages with a phoneme inventory of their own beside the English one (Whisper/ISO code -> data file)."""


def phoneme_inventory(language: str = "en") -> list[str]:
    """Sorted espeak-ng phoneme names: a closed TTS vocabulary.

    English: ``data/phoneme_inventory.json``, built by ``python -m voxledger.tasks.corpus.inventory``:
    all eight English espeak-ng languages read the 720 Harvard sentences plus coverage texts, every
    reported phoneme is kept, and every stressable vowel is added in all three stress forms (see
    ``inventory``). Includes ``"_"``. A language in `LANGUAGE_INVENTORIES` (Mandarin) adds its own
    set, built the same way from its voices and texts; any other language gets the English set.
    """
    extra = LANGUAGE_INVENTORIES.get(language.lower().split("-")[0])
    return sorted(set(_inventory("data/phoneme_inventory.json")) | set(_inventory(extra) if extra else ()))


@cache
def _inventory(name: str) -> tuple[str, ...]:
    path = resources.files("voxledger.tasks.corpus").joinpath(name)
    return tuple(json.loads(path.read_text(encoding="utf-8"))["phonemes"])
