"""Per-file facts the audit needs: existence, format, signal statistics and a fingerprint."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.errors import CorpusError, DigestMismatchError, UnsafePathError
from voxledger.schemas.manifest import Utterance
from voxledger.schemas.metrics import AudioStats
from voxledger.stores.blobs import LocalBlobStore
from voxledger.tasks.audit.fingerprint import fingerprint
from voxledger.tasks.corpus.audio import DECODE_ERRORS, SampleRange, read_utterance
from voxledger.tasks.corpus.paths import resolve_audio_path
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
    samples: SampleRange | None = None
    origin: str = ""  # manifest ``file:line`` the utterance came from, for messages


def resolve_audio(root: Path, utt: Utterance, audio_roots: tuple[Path, ...] = (), *, where: str = "") -> Path:
    """The audio file of ``utt`` under ``root`` or a declared audio root.

    Raises:
        UnsafePathError: the path escapes all of them (the message names ``where`` and the roots).
    """
    return resolve_audio_path(root, utt.audio, audio_roots, where=where)


def measure_file(
    root: Path,
    utt: Utterance,
    policy: AuditPolicy,
    *,
    audio_roots: tuple[Path, ...] = (),
    where: str = "",
    expected_sha256: str | None = None,
    store: LocalBlobStore | None = None,
    path: Path | None = None,
) -> FileFacts:
    """Read one utterance (the cut, for a segment) and measure it; problems become an error code,
    never an exception. ``where`` (``file:line``) goes into path errors.

    With ``expected_sha256`` a whole file is read once: its bytes are hashed and must match the
    digest the audit is keyed on (so what is measured is what the receipt names), are copied into
    ``store`` when given and not yet there, and are decoded from memory. ``path``: the file,
    already resolved and checked by the caller.

    Raises:
        DigestMismatchError: the file changed since it was hashed.
    """
    if path is None:
        try:
            path = resolve_audio(root, utt, audio_roots, where=where)
        except UnsafePathError as exc:
            return FileFacts(utt.id, None, "path_escape", str(exc))
    if not path.is_file():
        return FileFacts(utt.id, path, "audio_missing", f"{where + ': ' if where else ''}{utt.audio} does not exist")
    source: Path | io.BytesIO = path
    if expected_sha256 is not None and utt.start_s is None and utt.end_s is None:
        raw = path.read_bytes()
        actual = hashlib.sha256(raw).hexdigest()
        if actual != expected_sha256:
            raise DigestMismatchError(
                f"{where + ': ' if where else ''}{path} changed during the audit (hashed {expected_sha256}, now {actual}); "
                "leave the corpus unchanged while it is audited and run the audit again"
            )
        if store is not None and not store.intact(actual):
            store.put_hashed_bytes(raw, actual)
        source = io.BytesIO(raw)
    try:
        data, rng = read_utterance(source, utt)
    except CorpusError as exc:
        return FileFacts(utt.id, path, "audio_unreadable", str(exc))
    except DECODE_ERRORS as exc:
        return FileFacts(utt.id, path, "audio_unreadable", f"{utt.audio}: cannot decode audio ({exc})")
    channels, sr = data.shape[1], rng.sample_rate_hz
    mono = data.mean(axis=1) if channels > 1 else data[:, 0]
    stats = audio_stats(mono, sr, policy.validity, text=utt.text or None)
    code = fingerprint(mono, sr) if mono.size and "non_finite" not in stats.problems else None
    return FileFacts(utt.id, path, None, None, sr, channels, stats, code, rng, where)
