"""Read an utterance's audio: any format libsndfile decodes (WAV, FLAC, OGG/Vorbis/Opus, MP3), any
rate and channel count, and the cut of a longer recording when the utterance is a segment."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from voxledger.schemas.canonical import canonical_digest
from voxledger.schemas.errors import CorpusError
from voxledger.schemas.manifest import Utterance

# A Kaldi segment may end a little past its recording (times rounded to 10 ms frames); beyond
# this it names audio that is not there.
SEGMENT_END_SLACK_S = 0.05
DECODE_ERRORS = (sf.LibsndfileError, RuntimeError, ValueError, OSError)


@dataclass(frozen=True)
class SampleRange:
    """Which samples of a recording an utterance covers: ``[start, stop)`` at ``sample_rate_hz``."""

    start: int
    stop: int
    sample_rate_hz: int
    recording_frames: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.recording_frames


def sample_range(utt: Utterance, sample_rate_hz: int, frames: int) -> SampleRange:
    """The samples ``utt`` covers in a recording of ``frames`` samples.

    Raises:
        CorpusError: the segment starts or ends past the recording (beyond a 50 ms slack).
    """
    start = round((utt.start_s or 0.0) * sample_rate_hz)
    stop = frames if utt.end_s is None else round(utt.end_s * sample_rate_hz)
    if stop > frames and stop - frames <= SEGMENT_END_SLACK_S * sample_rate_hz:
        stop = frames
    if start >= frames or stop > frames:
        raise CorpusError(
            f"{utt.id}: segment {utt.start_s or 0.0:.3f}-{utt.end_s} s lies past the end of {utt.audio} "
            f"({frames / sample_rate_hz:.3f} s); fix the times in segments"
        )
    return SampleRange(start, stop, sample_rate_hz, frames)


def read_utterance(path: Path | io.BytesIO, utt: Utterance) -> tuple[np.ndarray, SampleRange]:
    """Decode ``utt``'s samples as float32 ``(frames, channels)`` and the range they came from.

    Raises:
        CorpusError: segment times outside the recording.
        soundfile.LibsndfileError / RuntimeError / ValueError / OSError: undecodable audio.
    """
    with sf.SoundFile(path if isinstance(path, io.BytesIO) else str(path)) as f:
        rng = sample_range(utt, f.samplerate, f.frames)
        if rng.start:
            f.seek(rng.start)
        data = f.read(rng.stop - rng.start, dtype="float32", always_2d=True)
    return data, rng


def segment_identity(recording_sha256: str, rng: SampleRange) -> str:
    """Identity of a cut: the recording's digest plus its sample range (the digest alone when whole)."""
    if rng.whole:
        return recording_sha256
    return canonical_digest(
        {"recording_sha256": recording_sha256, "start_sample": rng.start, "stop_sample": rng.stop, "sample_rate_hz": rng.sample_rate_hz}
    )
