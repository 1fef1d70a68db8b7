"""Small helpers the importers share: UTF-8 text files and manifest-relative labels."""

from __future__ import annotations

from pathlib import Path

from voxledger.schemas.errors import CorpusError

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".opus", ".mp3")


def label(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` for messages and origins."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def read_text(path: Path, root: Path) -> str | None:
    """A transcript file's text, stripped; None when it is not UTF-8 (reported by the caller)."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        return None


def require_folder(src: Path, what: str) -> Path:
    if not src.is_dir():
        raise CorpusError(f"{src} is not a folder; {what}")
    return src
