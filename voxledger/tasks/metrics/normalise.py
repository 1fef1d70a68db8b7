"""Closed registry of text normalisers applied before WER/CER: a ``Literal`` name -> a function.

- ``whisper_en``: Whisper's English normaliser, as packaged in ``whisper-normalizer`` (a port of
  ``whisper/normalizers/english.py`` with its spelling table): lowercases, spells out
  contractions ("don't" -> "do not"), turns spelled numbers into digits ("twenty five" -> "25"),
  maps British to American spelling and removes punctuation and filler words.
- ``basic``: NFKC, typographic apostrophes made straight, lowercase; every punctuation mark,
  symbol or control character becomes a space except an apostrophe between two letters or
  digits ("don't" stays), whitespace collapsed. No number handling.
- ``none``: the text unchanged (only whitespace is ever used to split words).

The version of each entry is recorded in ``TextMetricSpec.normaliser_version``; for
``whisper_en`` it is read from the installed distribution, so an upgrade is visible in every spec.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.metadata import version as dist_version
from typing import get_args

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import NORMALISER_VERSIONS, NormaliserName, TextMetricSpec

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2018": "'"})
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Normaliser:
    """A registered normaliser: its registry name, version string and function."""

    name: NormaliserName
    version: str
    apply: Callable[[str], str]


@cache
def _whisper_english() -> Callable[[str], str]:
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()  # type: ignore[no-any-return]


def whisper_en(text: str) -> str:
    """Whisper's English normaliser (``EnglishTextNormalizer``), loaded once."""
    return _whisper_english()(text)


@lru_cache(maxsize=1 << 16)
def basic(text: str) -> str:
    """Lowercase; punctuation, symbols and control characters become spaces, except an
    apostrophe between two letters or digits; whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).lower()
    last = len(text) - 1
    out = [
        c
        if (c == "'" and 0 < i < last and text[i - 1].isalnum() and text[i + 1].isalnum()) or unicodedata.category(c)[0] not in "PSCZ"
        else " "
        for i, c in enumerate(text)
    ]
    return _SPACES.sub(" ", "".join(out)).strip()


def identity(text: str) -> str:
    """Return ``text`` unchanged."""
    return text


def _whisper_en_version() -> str:
    return f"whisper-normalizer=={dist_version('whisper_normalizer')}:EnglishTextNormalizer"


NORMALISERS: dict[str, Normaliser] = {
    "whisper_en": Normaliser("whisper_en", _whisper_en_version(), whisper_en),
    "basic": Normaliser("basic", NORMALISER_VERSIONS["basic"], basic),
    "none": Normaliser("none", NORMALISER_VERSIONS["none"], identity),
}
if set(NORMALISERS) != set(get_args(NormaliserName)):  # pragma: no cover - import-time guard
    raise ImportError(f"normaliser registry {sorted(NORMALISERS)} != {get_args(NormaliserName)}")


def get_normaliser(name: str) -> Normaliser:
    """The registered normaliser ``name``; EvaluationError lists the valid names."""
    try:
        return NORMALISERS[name]
    except KeyError:
        raise EvaluationError(f"unknown normaliser {name!r}; choose one of {sorted(NORMALISERS)}") from None


def normaliser_for(spec: TextMetricSpec) -> Callable[[str], str]:
    """The function of ``spec.normaliser``, after checking the spec's version is this code's.

    Raises:
        EvaluationError: the spec was made with another version of the normaliser, so its
            numbers could not be reproduced here.
    """
    entry = get_normaliser(spec.normaliser)
    if spec.normaliser_version != entry.version:
        raise EvaluationError(
            f"TextMetricSpec.normaliser_version is {spec.normaliser_version!r} but the installed "
            f"{spec.normaliser!r} normaliser is {entry.version!r}; install the recorded version "
            "or score with a new spec"
        )
    return entry.apply
