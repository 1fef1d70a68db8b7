"""Phoneme durations for any corpus with text and audio: forced alignment against espeak-ng.

The tiny model trains on per-phoneme frame counts. A corpus may ship its own alignment files
(the demo corpus writes espeak's exact phoneme timing, ``extra["alignment"]``); every other
utterance is aligned here, before training, so the durations are a fixed, content-addressed input
of the run rather than a by-product of the model being trained.

Method (the one aeneas uses for sentences, applied to phonemes): espeak-ng speaks the
utterance's text in the corpus language and reports where each of its phonemes starts, so the
synthetic clip is a template whose phoneme boundaries are known exactly. The recording and the
template become per-utterance mean/variance-normalised cepstra (DCT of the 16 kHz log-mel, with
deltas), and a dynamic-programming warp maps every recording frame to one template frame: each
step advances the template by 0 .. ``max_advance`` frames, so the recording may be slower by any
factor and faster by up to ``max_advance``. A recording frame belongs to the phoneme whose
template span holds the frame it maps to; the counts per phoneme are its durations and sum to
the clip's frame count exactly. Everything is float64 numpy with fixed tie-breaking (lowest
advance wins), so the same audio and text give the same durations on a given machine and build.

Why not monotonic alignment search inside training (Glow-TTS/VITS): those durations change with
the model being trained, so they could not be bound into the run key as an input the way the
alignment files are; they also need many steps to settle, which a few-minute CPU run does not have.

Measured against espeak's exact timing of voices and speaking rates other than the template's:
mean absolute boundary error 0.33-0.52 frames (see ``MEASURED``; `measure_boundaries` reproduces
it, ``tests/tasks/backends/test_tiny_align.py`` guards it). Real speech is further from espeak
than any espeak voice; no human-labelled corpus was at hand to measure that.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from voxledger.schemas.canonical import canonical_bytes, canonical_digest
from voxledger.schemas.errors import CorpusError
from voxledger.tasks.backends.tiny.audio import HOP_LENGTH, SAMPLE_RATE_HZ, frame_count, log_mel
from voxledger.tasks.corpus import espeak

FORMAT = "voxledger-tiny-durations/1"
N_CEPSTRA = 6  # measured: see the comment on MEASURED
MAX_ADVANCE = 3
# espeak-ng voice for a manifest language code; anything else is passed to espeak as is
# ("de", "fr", "es", "pt-br", ...), which names its own language voices that way.
VOICE_FOR_LANGUAGE = {"en": "en-us", "en-us": "en-us", "en-gb": "en-gb", "zh": "cmn", "zh-cn": "cmn", "cmn": "cmn", "yue": "yue"}
"""Manifest language -> espeak-ng voice (espeak names Mandarin `cmn`; Whisper and the manifests say `zh`)."""
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,150}$")
# Mean absolute error of inner phoneme boundaries vs espeak's own timing, in frames (16 ms), over
# 25 Harvard sentences per voice (about 600 boundaries each; phonemes matched by sequence where a
# variant's phonemes differ), template en-us at 175 wpm (`measure_boundaries`):
#   en-us 175 wpm 0.00 (the template itself) | en-us+rob 0.33 | en-us 130 wpm 0.38 | en-us 300 wpm 0.34
#   en-us+m3 p40 110 wpm 0.52 | en-us+f4 p60 0.50 | en-us+f3 p70 230 wpm 0.52 | en+m7 0.40 | en+f2 0.46
# 95-100% of boundaries within 1 frame. Cepstra kept: 5 -> 0.43/0.46/0.51 (f4/f3/m3, 12 sentences),
# 6 -> 0.51/0.55/0.52, 8 -> 0.58/0.62/0.55, 13 -> 1.29/1.31/0.55: higher orders follow the pitch
# harmonics of the higher voices; 6 keeps a little more spectral detail for real speech than 5.
MEASURED = {
    "en-us+rob": 0.33,
    "en-us@130wpm": 0.38,
    "en-us@300wpm": 0.34,
    "en-us+m3@110wpm": 0.52,
    "en-us+f4": 0.50,
    "en-us+f3@230wpm": 0.52,
    "en+m7": 0.40,
    "en+f2": 0.46,
}


def frame_durations(end_samples: list[int], n_frames: int) -> np.ndarray:
    """Frames per phoneme from phoneme end positions (samples), summing exactly to ``n_frames``."""
    ends = np.floor(np.asarray(end_samples, dtype=np.float64) / HOP_LENGTH + 0.5).astype(np.int64)
    ends = np.maximum.accumulate(np.clip(ends, 0, n_frames))
    ends[-1] = n_frames
    return np.diff(ends, prepend=0)


def espeak_voice(language: str) -> str:
    """The espeak-ng voice that phonemizes ``language`` (manifest code, e.g. ``en`` -> ``en-us``)."""
    return VOICE_FOR_LANGUAGE.get(language.lower(), language.lower())


@dataclass(frozen=True)
class Template:
    """espeak's rendering of a text: phonemes (leading silence first), their frame counts, features."""

    phonemes: tuple[str, ...]
    frames: np.ndarray  # (P,) int64, sums to the template's frame count
    features: np.ndarray  # (N, 2 * N_CEPSTRA) float64


@dataclass(frozen=True)
class Durations:
    """Frames per phoneme of one recording (16 kHz, hop 256) and where they came from."""

    phonemes: tuple[str, ...]
    frames: np.ndarray  # (P,) int64, sums to the recording's frame count
    source: str  # "alignment_file" | "espeak_warp"

    def to_bytes(self, utterance_id: str) -> bytes:
        """Canonical JSON of this file (the unit the features tree stores)."""
        doc = {
            "format": FORMAT,
            "utterance": utterance_id,
            "source": self.source,
            "sample_rate_hz": SAMPLE_RATE_HZ,
            "hop_length": 256,
            "phonemes": list(self.phonemes),
            "frames": [int(f) for f in self.frames],
        }
        return canonical_bytes(doc)

    def to_value(self) -> dict[str, object]:
        """The durations as the memo stores them (`voxledger.stores.memo`)."""
        return {"phonemes": list(self.phonemes), "frames": [int(f) for f in self.frames], "source": self.source}

    @classmethod
    def from_value(cls, value: dict[str, object]) -> Durations:
        """The inverse of `to_value`."""
        return cls(tuple(value["phonemes"]), np.asarray(value["frames"], dtype=np.int64), str(value["source"]))  # type: ignore[arg-type]


# What forced alignment's result depends on beyond its inputs: these modules' source (reading and
# resampling audio, log-mel, the warp, espeak-ng's helper) and the numeric and audio packages
# under them. `aligner_identity` digests both; a change to any of them starts the memo afresh.
ALIGNER_MODULES = (
    "voxledger.tasks.backends.tiny.align",
    "voxledger.tasks.backends.tiny.audio",
    "voxledger.tasks.backends.tiny.data",
    "voxledger.tasks.corpus.audio",
    "voxledger.tasks.corpus.espeak",
    "voxledger.tasks.corpus._espeak_native",
)
ALIGNER_PACKAGES = ("numpy", "scipy", "librosa", "soxr", "soundfile", "espeakng-loader")


@cache
def aligner_identity() -> str:
    """SHA-256 over the aligner's module sources and its packages' versions (see ``ALIGNER_MODULES``)."""
    import importlib
    import importlib.metadata
    import inspect

    sources = {m: hashlib.sha256(Path(inspect.getfile(importlib.import_module(m))).read_bytes()).hexdigest() for m in ALIGNER_MODULES}
    versions = {p: importlib.metadata.version(p) for p in ALIGNER_PACKAGES}
    return canonical_digest(
        {"format": FORMAT, "max_advance": MAX_ADVANCE, "n_cepstra": N_CEPSTRA, "sources": sources, "versions": versions}
    )


def durations_path(utterance_id: str) -> str:
    """Relative path of an utterance's durations file in the features tree."""
    if _SAFE_ID.match(utterance_id):
        return f"durations/{utterance_id}.json"
    return f"durations/id-{hashlib.sha256(utterance_id.encode()).hexdigest()[:32]}.json"


def cepstra(mel: np.ndarray) -> np.ndarray:
    """Per-utterance normalised cepstra and deltas ``(T, 2 * N_CEPSTRA)`` of log-mel ``(T, 80)``.

    Normalising each coefficient over the utterance removes most of the channel and speaker
    offset between a recording and espeak's voice (cepstral mean and variance normalisation).
    """
    from scipy.fft import dct  # scipy's: imported by aligning, not by reading durations back from a memo

    c = dct(np.asarray(mel, dtype=np.float64), type=2, norm="ortho", axis=1)[:, :N_CEPSTRA]
    c = (c - c.mean(axis=0)) / (c.std(axis=0) + 1e-6)
    padded = np.pad(c, ((1, 1), (0, 0)), mode="edge")
    delta = (padded[2:] - padded[:-2]) / 2.0
    return np.concatenate([c, delta], axis=1)


def template(text: str, language: str) -> Template:
    """espeak-ng's phonemes, exact frame counts and features for ``text`` in ``language``."""
    spoken = espeak.resample_synthesis(espeak.synthesize(text, voice=espeak_voice(language)), SAMPLE_RATE_HZ)
    n = frame_count(len(spoken.audio))
    frames = frame_durations([seg.end_sample for seg in spoken.phonemes], n)
    return Template(tuple(seg.phoneme for seg in spoken.phonemes), frames, cepstra(log_mel(spoken.audio)))


def warp(recording: np.ndarray, reference: np.ndarray, max_advance: int = MAX_ADVANCE) -> np.ndarray:
    """For each recording frame, the reference frame it maps to (monotonic, first to first, last to last).

    Dynamic programming over recording frames: the reference index advances by 0 .. ``max_advance``
    per recording frame and each recording frame pays its Euclidean distance to the reference
    frame it lands on. Ties go to the smallest advance.

    Raises:
        ValueError: the recording is too short to cover the reference at ``max_advance``.
    """
    n_rec, n_ref = len(recording), len(reference)
    if (n_rec - 1) * max_advance < n_ref - 1:
        raise ValueError(f"recording of {n_rec} frames cannot cover a reference of {n_ref} frames at {max_advance}x")
    from scipy.spatial.distance import cdist

    cost = cdist(recording, reference)
    total = np.full(n_ref, np.inf)
    total[0] = cost[0, 0]
    back = np.zeros((n_rec, n_ref), dtype=np.int8)
    shifted = np.full((max_advance + 1, n_ref), np.inf)
    for t in range(1, n_rec):
        for a in range(max_advance + 1):
            shifted[a, a:] = total[: n_ref - a] if a else total
        step = np.argmin(shifted, axis=0)  # first minimum: the smallest advance wins ties
        total = cost[t] + shifted[step, np.arange(n_ref)]
        back[t] = step
    path = np.empty(n_rec, dtype=np.int64)
    j = n_ref - 1
    for t in range(n_rec - 1, -1, -1):
        path[t] = j
        j -= int(back[t, j])
    return path


def align(mel: np.ndarray, tmpl: Template) -> np.ndarray:
    """Frames per template phoneme for a recording's log-mel ``(T, 80)``; sums to T."""
    # a recording under a third of espeak's length (above ~500 words a minute) is refused by `warp`:
    # far more often a wrong transcript than a fast speaker
    path = warp(cepstra(mel), tmpl.features, MAX_ADVANCE)
    phoneme_of_frame = np.repeat(np.arange(len(tmpl.phonemes)), tmpl.frames)
    return np.bincount(phoneme_of_frame[path], minlength=len(tmpl.phonemes)).astype(np.int64)


def durations_from_file(path: Path, n_frames: int) -> Durations:
    """Durations from an alignment file in the demo format (phoneme start/end in 16 kHz samples).

    Raises:
        CorpusError: unreadable file, wrong sample rate or an empty phoneme list.
    """
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CorpusError(f"{path}: alignment file unreadable ({exc}); fix it or drop the 'alignment' column") from None
    if doc.get("sample_rate_hz") != SAMPLE_RATE_HZ or not doc.get("phonemes"):
        raise CorpusError(f"{path}: needs sample_rate_hz 16000 and a non-empty phoneme list; fix it or drop the 'alignment' column")
    segs = doc["phonemes"]
    frames = frame_durations([int(s["end_sample"]) for s in segs], n_frames)
    return Durations(tuple(str(s["phoneme"]) for s in segs), frames, "alignment_file")


def durations_by_warp(mel: np.ndarray, text: str, language: str) -> Durations:
    """Durations for a recording (log-mel) of ``text`` by warping it onto espeak's rendering."""
    tmpl = template(text, language)
    try:
        frames = align(mel, tmpl)
    except ValueError as exc:
        raise CorpusError(f"text {text[:60]!r}: {exc}; check the transcript matches the audio") from None
    return Durations(tmpl.phonemes, frames, "espeak_warp")


def measure_boundaries(sentences: list[str], voice: str, pitch: int = 50, rate_wpm: int = 175, language: str = "en") -> np.ndarray:
    """Boundary errors (frames) of `durations_by_warp` against espeak's own timing of ``voice``.

    Phonemes are matched by sequence (``difflib``), so a variant that phonemizes a word
    differently is scored on the phonemes both share; the leading silence's start is not scored.
    """
    import difflib

    errors: list[int] = []
    for text in sentences:
        spoken = espeak.resample_synthesis(espeak.synthesize(text, voice=voice, pitch=pitch, rate_wpm=rate_wpm), SAMPLE_RATE_HZ)
        true = frame_durations([p.end_sample for p in spoken.phonemes], frame_count(len(spoken.audio)))
        found = durations_by_warp(log_mel(spoken.audio), text, language)
        true_starts, found_starts = np.cumsum(true) - true, np.cumsum(found.frames) - found.frames
        names = [p.phoneme for p in spoken.phonemes]
        for a, b, size in difflib.SequenceMatcher(a=names, b=list(found.phonemes), autojunk=False).get_matching_blocks():
            errors += [abs(int(true_starts[a + k]) - int(found_starts[b + k])) for k in range(size) if a + k > 0]
    return np.asarray(errors, dtype=np.int64)
