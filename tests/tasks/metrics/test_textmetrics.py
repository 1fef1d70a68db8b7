"""WER/CER: conformance goldens per normaliser, micro vs macro aggregation, jiwer agreement."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import jiwer
import pytest

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import TextMetricSpec
from voxledger.tasks.metrics.textmetrics import aggregate, score_corpus, score_text

# Each expected rate was worked out by hand from the normalised texts (edit distance over
# words, then over characters with spaces) and agrees with jiwer 4.0.0 + whisper-normalizer
# 0.1.15; the texts were chosen to show where the normalisers disagree.
CASES: list[dict[str, Any]] = [
    json.loads(line) for line in (Path(__file__).parent / "fixtures" / "conformance.jsonl").read_text().splitlines() if line.strip()
]
NORMALISERS = ("whisper_en", "basic", "none")


def test_fixture_covers_every_case_and_normaliser() -> None:
    assert len(CASES) == 14
    assert len({c["id"] for c in CASES}) == len(CASES)
    for case in CASES:
        assert sorted(case["expected"]) == sorted(NORMALISERS), case["id"]


@pytest.mark.parametrize("normaliser", NORMALISERS)
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_conformance(case: dict[str, Any], normaliser: str) -> None:
    score = score_text(case["ref"], case["hyp"], TextMetricSpec(normaliser=normaliser))
    expected = case["expected"][normaliser]
    assert score.wer == pytest.approx(float(Fraction(expected["wer"])), abs=1e-12)
    assert score.cer == pytest.approx(float(Fraction(expected["cer"])), abs=1e-12)


def test_counts_and_texts_are_reported() -> None:
    score = score_text("The cat sat.", "the bat sat down", TextMetricSpec(normaliser="basic"))
    assert (score.hits, score.substitutions, score.deletions, score.insertions) == (2, 1, 0, 1)
    assert (score.ref_words, score.word_edits, score.ref_chars, score.char_edits) == (3, 2, 11, 6)
    assert (score.normalised_ref, score.normalised_hyp) == ("the cat sat", "the bat sat down")


def test_rates_match_jiwer_when_reference_is_not_empty() -> None:
    refs = ["a b c d", "hello there world", "x"]
    hyps = ["a c d e", "hello world", "y z"]
    spec = TextMetricSpec(normaliser="none")
    for ref, hyp in zip(refs, hyps, strict=True):
        score = score_text(ref, hyp, spec)
        assert score.wer == pytest.approx(jiwer.wer(ref, hyp))
        assert score.cer == pytest.approx(jiwer.cer(ref, hyp))
    _, corpus = score_corpus(refs, hyps, spec)
    assert corpus.wer_micro == pytest.approx(jiwer.wer(refs, hyps))  # jiwer pools edits: micro
    assert corpus.cer_micro == pytest.approx(jiwer.cer(refs, hyps))


def test_micro_and_macro_differ_as_defined() -> None:
    # 1 edit over 10 words, then 1 edit over 1 word: micro 2/11, macro (0.1 + 1.0) / 2.
    refs = ["one two three four five six seven eight nine ten", "yes"]
    hyps = ["one two three four five six seven eight nine", "no"]
    scores, corpus = score_corpus(refs, hyps, TextMetricSpec(normaliser="basic"))
    assert [s.wer for s in scores] == [pytest.approx(0.1), pytest.approx(1.0)]
    assert corpus.wer_micro == pytest.approx(2 / 11)
    assert corpus.wer_macro == pytest.approx(0.55)
    assert (corpus.utterances, corpus.ref_words, corpus.word_edits) == (2, 11, 2)


def test_empty_reference_counts_in_micro_numerator_only() -> None:
    scores, corpus = score_corpus(["a b", ""], ["a b", "c d e"], TextMetricSpec(normaliser="none"))
    assert scores[1].wer == 1.0 and scores[1].insertions == 3
    assert corpus.empty_references == 1
    assert corpus.wer_micro == pytest.approx(3 / 2)
    assert corpus.wer_macro == pytest.approx(0.5)


def test_all_empty_corpus_follows_the_empty_reference_rule() -> None:
    _, silent = score_corpus(["", ""], ["", ""], TextMetricSpec(normaliser="none"))
    _, noisy = score_corpus(["", ""], ["", "oops"], TextMetricSpec(normaliser="none"))
    assert (silent.wer_micro, noisy.wer_micro) == (0.0, 1.0)


def test_errors_name_the_problem() -> None:
    with pytest.raises(EvaluationError, match="2 references but 1 hypotheses"):
        score_corpus(["a", "b"], ["a"])
    with pytest.raises(EvaluationError, match="zero utterances"):
        aggregate([])
    with pytest.raises(EvaluationError, match="hyp must be str"):
        score_text("a", None)  # type: ignore[arg-type]


def test_spec_from_another_normaliser_version_is_refused() -> None:
    stale = TextMetricSpec(normaliser="whisper_en", normaliser_version="whisper-normalizer==0.1.9")
    with pytest.raises(EvaluationError, match="0.1.9.*0.1.15"):
        score_text("a", "a", stale)
