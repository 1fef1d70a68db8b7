"""Per-file facts the audit needs: existence, format, signal statistics and a fingerprint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.errors import UnsafePathError
from voxledger.schemas.manifest import Utterance
from voxledger.schemas.metrics import AudioStats
from voxledger.stores.trees import check_relative
from voxledger.tasks.audit.fingerprint import fingerprint
from voxledger.tasks.metrics.validity import audio_stats


@dataclass(frozen=True)
class FileFacts:
    """What was measured for one utterance's audio (``error`` set when it could not be read)."""

    utterance_id: str
    path: Path | None
    error_code: str | None = None
    error: str | None = None
    sample_rate_hz: int | None = None
    channels: int | None = None
    stats: AudioStats | None = None
    code: bytes | None = None


def resolve_audio(root: Path, utt: Utterance) -> Path:
    """The audio file of ``utt`` inside ``root``; UnsafePathError when it would escape the root."""
    check_relative(utt.audio, root=root)
    path = (root / utt.audio).absolute()
    real = path.resolve()
    if not real.is_relative_to(root.resolve()):
        raise UnsafePathError(f"audio path {utt.audio!r} resolves to {real}, outside the corpus root {root}")
    return path


def measure_file(root: Path, utt: Utterance, policy: AuditPolicy) -> FileFacts:
    """Read one file and measure it; problems become an error code, never an exception."""
    try:
        path = resolve_audio(root, utt)
    except UnsafePathError as exc:
        return FileFacts(utt.id, None, "path_escape", str(exc))
    if not path.is_file():
        return FileFacts(utt.id, path, "audio_missing", f"{utt.audio} does not exist under {root}")
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
        return FileFacts(utt.id, path, "audio_unreadable", f"{utt.audio}: cannot decode audio ({exc})")
    channels = data.shape[1]
    mono = data.mean(axis=1) if channels > 1 else data[:, 0]
    stats = audio_stats(mono, sr, policy.validity, text=utt.text or None)
    code = fingerprint(mono, sr) if mono.size and np.isfinite(mono).all() else None
    return FileFacts(utt.id, path, None, None, sr, channels, stats, code)
