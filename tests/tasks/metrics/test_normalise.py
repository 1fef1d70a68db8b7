"""The closed normaliser registry: names, versions, and what each normaliser does."""

from __future__ import annotations

from importlib.metadata import version
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import NORMALISER_VERSIONS, NormaliserName, TextMetricSpec
from voxledger.tasks.metrics.normalise import NORMALISERS, basic, get_normaliser, whisper_en


def test_registry_is_exactly_the_literal_names() -> None:
    assert sorted(NORMALISERS) == sorted(get_args(NormaliserName))
    assert len(NORMALISERS) == 7


def test_schema_versions_match_the_installed_code() -> None:
    for name, entry in NORMALISERS.items():
        assert entry.name == name
        assert NORMALISER_VERSIONS[name] == entry.version
        assert TextMetricSpec(normaliser=name).normaliser_version == entry.version


def test_whisper_normaliser_is_the_pinned_distribution() -> None:
    assert version("whisper_normalizer") == "0.1.15"
    assert NORMALISERS["whisper_en"].version.startswith("whisper-normalizer==0.1.15:")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Behaviour of whisper/normalizers/english.py (EnglishTextNormalizer), as packaged.
        ("Mr. Smith can't come.", "mister smith can not come"),
        ("one oh one", "101"),
        ("It costs twenty five dollars.", "it costs $25"),
        ("The colour of honour", "the color of honor"),
        ("Um, well, hmm.", "well"),
    ],
)
def test_whisper_en(text: str, expected: str) -> None:
    assert whisper_en(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Don't  STOP!", "don't stop"),
        ("'Quoted' words", "quoted words"),
        ("rock \u2019n\u2019 roll, it\u2019s", "rock n roll it's"),
        ("twenty-five 25%", "twenty five 25"),
        ("\u6211\u7231\u5317\u4eac\uff01", "\u6211\u7231\u5317\u4eac"),
        ("\uff21\uff22\uff23", "abc"),  # NFKC folds full-width letters
        ("  \n ", ""),
    ],
)
def test_basic(text: str, expected: str) -> None:
    assert basic(text) == expected


def test_none_is_identity() -> None:
    assert NORMALISERS["none"].apply(" Keep, THIS ") == " Keep, THIS "


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(EvaluationError, match="basic"):
        get_normaliser("english")


@given(st.text(max_size=60))
def test_basic_is_idempotent_and_leaves_only_word_apostrophes(text: str) -> None:
    once = basic(text)
    assert basic(once) == once
    assert once == once.strip() and "  " not in once
    for i, ch in enumerate(once):
        if ch == "'":
            assert 0 < i < len(once) - 1 and once[i - 1].isalnum() and once[i + 1].isalnum()
