"""Content gate on hand-written transcripts: each failure mode trips its own check."""

from __future__ import annotations

from typing import get_args

from voxledger.schemas.metrics import ContentGateSpec, GateCheckName, GateResult
from voxledger.tasks.metrics.content_gate import content_gate, repeated_ngram_excess

REF = "Please call Stella and ask her to bring these things with her from the store."
INSTRUCTION = "Speak in a cheerful and excited voice."


def failed(result: GateResult) -> set[str]:
    return {c.name for c in result.checks if not c.passed}


def test_faithful_transcript_passes_every_check() -> None:
    result = content_gate(REF, "please call stella and ask her to bring these things with her from the start")
    assert result.passed and failed(result) == set()
    assert [c.name for c in result.checks] == [n for n in get_args(GateCheckName) if n != "cer"]  # cer replaces wer for characters
    instruction = result.checks[-1]
    assert instruction.value is None and instruction.detail == "skipped: no instruction given"


def test_looping_hypothesis_fails() -> None:
    loop = "please call stella " * 6
    result = content_gate("Please call Stella.", loop)
    assert not result.passed
    assert {"repeated_ngrams", "wer"} <= failed(result)
    repeats = next(c for c in result.checks if c.name == "repeated_ngrams")
    assert repeats.value == 5.0 + 4.0 + 4.0  # 'please call stella' x6, the two wrap-around 3-grams x5


def test_repeats_present_in_the_reference_are_allowed() -> None:
    ref = "no no no no, not again"
    hyp_words = ["no", "no", "no", "no", "not", "again"]
    assert repeated_ngram_excess(ref.replace(",", "").split(), hyp_words, 2) == 0
    assert content_gate(ref, "no no no no not again").passed


def test_fluent_but_unrelated_speech_fails_overlap() -> None:
    result = content_gate(REF, "the weather is lovely in the mountains this time of year")
    assert "reference_overlap" in failed(result)


def test_spoken_instruction_is_caught() -> None:
    hyp = "speak in a cheerful and excited voice please call stella and ask her to bring these things with her from the store"
    result = content_gate(REF, hyp, INSTRUCTION)
    assert failed(result) == {"spoken_instruction"}  # WER alone (7/15 = 0.47) would let it pass
    assert next(c for c in result.checks if c.name == "spoken_instruction").value == 1.0


def test_instruction_words_that_belong_to_the_text_are_not_blamed() -> None:
    ref = "Speak in a cheerful voice when you greet the guests."
    result = content_gate(ref, "speak in a cheerful voice when you greet the guests", INSTRUCTION)
    assert result.passed


def test_empty_transcript_fails() -> None:
    result = content_gate(REF, "")
    assert {"wer", "reference_overlap"} <= failed(result)


def test_spec_bounds_are_applied() -> None:
    lenient = ContentGateSpec(max_wer=10.0, max_repeated_ngram_excess=100, min_reference_overlap=0.0)
    assert content_gate("Please call Stella.", "please call stella " * 6, spec=lenient).passed
    off = ContentGateSpec(check_spoken_instruction=False)
    check = content_gate(REF, INSTRUCTION, INSTRUCTION, off).checks[-1]
    assert check.passed and check.detail == "skipped: disabled by spec"
