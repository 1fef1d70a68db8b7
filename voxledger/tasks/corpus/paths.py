"""Where a manifest's audio paths may point: the corpus root and the audio roots a user declares.

A manifest path is relative to the corpus root (``wavs/a.wav``), or absolute, or climbs out of
the root with ``..`` (``../audio/a.wav``, the way Kaldi and ESPnet recipes write ``wav.scp``).
The last two are accepted only when they land inside a declared audio root, both as written and
after following symlinks. The roots are never part of any identity: audio is known by its content
digest, and a tree names out-of-root files by the path the manifest wrote (see ``tree_name``).
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

from voxledger.schemas.errors import UnsafePathError


def normalise_roots(roots: tuple[Path, ...] | list[Path]) -> tuple[Path, ...]:
    """Absolute, de-duplicated roots in the order given; UnsafePathError for a root that is no folder."""
    out: list[Path] = []
    for r in roots:
        p = Path(os.path.abspath(r))
        if not p.is_dir():
            raise UnsafePathError(f"audio root {r} is not a folder; pass --audio-root with the folder that holds the audio")
        if p not in out:
            out.append(p)
    return tuple(out)


def _inside(path: Path, bases: tuple[Path, ...]) -> bool:
    return any(path == b or path.is_relative_to(b) for b in bases)


class AudioPathResolver:
    """Resolves many manifest paths of one corpus; each folder's real path is looked up once.

    A file that is itself a symlink is followed in full; otherwise its real path is its folder's
    real path plus its name, which is what ``Path.resolve`` gives, for a few syscalls less.
    """

    def __init__(self, root: Path, audio_roots: tuple[Path, ...] = ()) -> None:
        self.root = Path(os.path.abspath(root))
        self.audio_roots = audio_roots
        self.bases = (self.root, *audio_roots)
        self.real_bases = tuple(b.resolve() for b in self.bases)
        self._real_dirs: dict[Path, Path] = {}

    def _real(self, lexical: Path) -> Path:
        try:
            if stat.S_ISLNK(os.lstat(lexical).st_mode):
                return lexical.resolve()
        except OSError:
            return lexical.resolve()
        parent = lexical.parent
        real_parent = self._real_dirs.get(parent)
        if real_parent is None:
            real_parent = self._real_dirs[parent] = parent.resolve()
        return real_parent / lexical.name

    def __call__(self, audio: str, *, where: str = "") -> Path:
        """The file ``audio`` names, checked to lie under the root or a declared audio root.

        Raises:
            UnsafePathError: as ``resolve_audio_path``.
        """
        if not audio or "\\" in audio or "\x00" in audio:
            raise UnsafePathError(f"{where or 'manifest'}: audio path {audio!r} is empty or holds a backslash/NUL; write a POSIX path")
        lexical = Path(posixpath.normpath(audio if audio.startswith("/") else posixpath.join(self.root.as_posix(), audio)))
        if not _inside(lexical, self.bases) or not _inside(self._real(lexical), self.real_bases):
            declared = ", ".join(str(r) for r in self.audio_roots) or "none declared"
            raise UnsafePathError(
                f"{where or 'manifest'}: audio path {audio!r} resolves to {lexical.resolve()}, outside the corpus root {self.root} "
                f"and the audio roots ({declared}); pass --audio-root with the folder that holds it"
            )
        return lexical


def resolve_audio_path(root: Path, audio: str, audio_roots: tuple[Path, ...] = (), *, where: str = "") -> Path:
    """The file ``audio`` names, checked to lie under ``root`` or a declared audio root.

    Args:
        root: the corpus root (relative paths are joined to it).
        audio: the manifest's path, POSIX style.
        audio_roots: folders the user declared as holding audio.
        where: ``file:line`` of the manifest line, put in the error.

    Raises:
        UnsafePathError: the path is empty, holds a backslash or NUL, or resolves outside every
            allowed folder; the message names the line, the path and the roots, and the fix.
    """
    return AudioPathResolver(root, audio_roots)(audio, where=where)


def tree_name(audio: str) -> str:
    """A relative name for ``audio`` in an audio tree, derived from the manifest path alone.

    Paths inside the corpus root keep their name; absolute paths become ``@abs/...`` and leading
    ``..`` parts become ``@up``, so a tree never depends on where the roots happen to be declared.
    """
    norm = posixpath.normpath(audio)
    if norm.startswith("/"):
        return "@abs" + norm
    parts = norm.split("/")
    return "/".join("@up" if p == ".." else p for p in parts)
