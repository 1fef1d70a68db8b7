"""Importers for the public corpus layouts, as a closed registry: a layout name maps to a reader.

Each reader takes the layout's folder (or, for lhotse, a folder or one manifest file) and returns
a ``LoadedCorpus`` whose audio paths are relative to that folder. ``detect_layout`` decides by
file names alone; it never tries readers in turn.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from voxledger.tasks.corpus.importers import audiofolder, lhotse_manifests, libritts, ljspeech, vctk
from voxledger.tasks.corpus.records import LoadedCorpus

ImportFormat = Literal["ljspeech", "libritts", "vctk", "audiofolder", "lhotse"]

IMPORTERS: dict[str, Callable[[Path], LoadedCorpus]] = {
    "ljspeech": ljspeech.load,
    "libritts": libritts.load,
    "vctk": vctk.load,
    "audiofolder": audiofolder.load,
    "lhotse": lhotse_manifests.load,
}
DETECTORS: dict[str, Callable[[Path], bool]] = {
    "lhotse": lhotse_manifests.looks_like,
    "vctk": vctk.looks_like,
    "audiofolder": audiofolder.looks_like,
    "ljspeech": ljspeech.looks_like,
    "libritts": libritts.looks_like,
}


def detect_layout(path: Path) -> str | None:
    """The one public layout ``path`` is laid out in, or None; checked in a fixed order."""
    for name, looks_like in DETECTORS.items():
        if looks_like(path):
            return name
    return None
