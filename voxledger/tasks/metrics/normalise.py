"""Closed registry of text normalisers applied before WER/CER: a ``Literal`` name -> a function.

- ``whisper_en``: Whisper's English normaliser, as packaged in ``whisper-normalizer`` (a port of
  ``whisper/normalizers/english.py`` with its spelling table): lowercases, spells out
  contractions ("don't" -> "do not"), turns spelled numbers into digits ("twenty five" -> "25"),
  maps British to American spelling and removes punctuation and filler words.
- ``basic``: NFKC, typographic apostrophes made straight, lowercase; every punctuation mark,
  symbol or control character becomes a space except an apostrophe between two letters or
  digits ("don't" stays), whitespace collapsed. No number handling.
- ``none``: the text unchanged (only whitespace is ever used to split words).
- ``zh``: Chinese, and Chinese mixed with English. NFKC (full-width letters, digits and
  punctuation become their ASCII forms), traditional characters to simplified (zhconv,
  ``zh-hans``: script only, no regional vocabulary), lowercase, every punctuation mark of both
  scripts (zhon's CJK punctuation, Unicode categories P and S) becomes a space, an apostrophe
  between two letters stays. Tokens: every Han character, kana or Hangul syllable is its own
  token; a run of Latin letters or digits is one token. Joined by single spaces, so a "word" error
  rate over this text is the mixed error rate (Han characters plus English words), and CER
  (spaces ignored, `NORMALISER_SPACES`) counts characters only. Digits stay digits.
- ``zh_digits``: ``zh`` after Arabic numerals are read out as Chinese numerals (cn2an's
  ``an2cn`` transform: "2024年" -> "二零二四年", "3.5" -> "三点五"), for references written in
  digits that an ASR model spells out, or the reverse.
- ``seedtts_en`` / ``seedtts_zh``: Seed-TTS-eval's ``run_wer.py`` (BytedanceSpeech/seed-tts-eval,
  commit 95003fe) exactly: every character of zhon's CJK punctuation and ``string.punctuation``
  except the apostrophe is deleted (not replaced by a space), one double space becomes one; ``en``
  then lowercases, ``zh`` splits into characters (zhconv ``zh-cn`` first, which that script applies
  to the ASR output; here to both sides, a no-op for simplified references).

The version of each entry is recorded in ``TextMetricSpec.normaliser_version``; for
``whisper_en`` it is read from the installed distribution, so an upgrade is visible in every spec.
"""

from __future__ import annotations

import re
import string
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
def _zh() -> tuple[Callable[[str, str], str], str]:
    """zhconv's converter and zhon's CJK punctuation, imported once (zhconv warns about pkg_resources)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import zhconv
    from zhon.hanzi import punctuation

    return zhconv.convert, punctuation


_CJK_TOKEN = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+"
)


@lru_cache(maxsize=1 << 16)
def zh(text: str) -> str:
    """Chinese (and mixed Chinese-English) text as space-separated tokens: Han characters one by
    one, Latin or digit runs whole; simplified, lowercase, no punctuation of either script."""
    convert, cjk_punctuation = _zh()
    text = convert(unicodedata.normalize("NFKC", text), "zh-hans").translate(_APOSTROPHES).lower()
    last = len(text) - 1
    kept = [
        c if _inner_apostrophe(text, i, last) or not (c in cjk_punctuation or unicodedata.category(c)[0] in "PSCZ") else " "
        for i, c in enumerate(text)
    ]
    return " ".join(_CJK_TOKEN.findall("".join(kept)))


def _inner_apostrophe(text: str, i: int, last: int) -> bool:
    return text[i] == "'" and 0 < i < last and text[i - 1].isalnum() and text[i + 1].isalnum()


_DIGITS = re.compile(r"\d+(?:\.\d+)?")


@lru_cache(maxsize=1 << 16)
def zh_digits(text: str) -> str:
    """``zh`` after Arabic numerals become Chinese numerals (cn2an ``an2cn``; a run cn2an's whole-text
    transform refuses is read number by number)."""
    import cn2an

    text = unicodedata.normalize("NFKC", text)
    try:
        spoken = cn2an.transform(text, "an2cn")
    except (ValueError, KeyError, IndexError):
        spoken = _DIGITS.sub(lambda m: cn2an.an2cn(m.group(0), "low"), text)
    return zh(spoken)


def _seedtts_strip(text: str) -> str:
    """Seed-TTS-eval's punctuation rule: delete each punctuation character except ``'``, then one
    pass of double space -> single space."""
    _, cjk_punctuation = _zh()
    for x in cjk_punctuation + string.punctuation:
        if x != "'":
            text = text.replace(x, "")
    return text.replace("  ", " ")


def seedtts_en(text: str) -> str:
    """Seed-TTS-eval's English rule: punctuation deleted (apostrophes kept), lowercase."""
    return _seedtts_strip(text).lower()


def seedtts_zh(text: str) -> str:
    """Seed-TTS-eval's Chinese rule: zhconv ``zh-cn``, punctuation deleted, one token per character."""
    convert, _ = _zh()
    return " ".join(_seedtts_strip(convert(text, "zh-cn")))


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
    "zh": Normaliser("zh", NORMALISER_VERSIONS["zh"], zh),
    "zh_digits": Normaliser("zh_digits", NORMALISER_VERSIONS["zh_digits"], zh_digits),
    "seedtts_en": Normaliser("seedtts_en", NORMALISER_VERSIONS["seedtts_en"], seedtts_en),
    "seedtts_zh": Normaliser("seedtts_zh", NORMALISER_VERSIONS["seedtts_zh"], seedtts_zh),
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
