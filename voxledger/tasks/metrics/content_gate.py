"""Content gate: does the transcript of a synthesised clip say the text, and nothing else?

Four checks on normalised units (the spec's text normaliser), each reported with its value,
bound and verdict, so a failure says which way the audio went wrong. The unit is a word, or a
character for Chinese, Cantonese, Japanese and Korean (``unit: char``, or ``by_language`` with the
prompt's language); with characters the error check is ``cer`` and n-grams are character n-grams:

- ``wer`` (``cer``): word (character) error rate against the reference, at most ``max_wer`` (``max_cer``).
- ``repeated_ngrams``: for every n-gram the hypothesis says more than once, the occurrences
  beyond those in the reference (at least one is allowed), summed; catches looping/stuttering
  output, at most ``max_repeated_ngram_excess``.
- ``reference_overlap``: fraction of reference words (as a multiset) present in the
  hypothesis; catches fluent speech about something else, at least ``min_reference_overlap``.
- ``spoken_instruction``: fraction of the style instruction's n-grams (n = ``ngram_n``, or the
  instruction's length if shorter) heard in the hypothesis but absent from the reference;
  catches a model reading its instruction aloud, at most ``max_instruction_ngram_fraction``.
  Skipped (passes, value ``None``) when there is no instruction or the check is off.
"""

from __future__ import annotations

from collections import Counter

from voxledger.schemas.metrics import ContentGateSpec, ContentUnit, GateCheck, GateCheckName, GateResult, TextScore, content_unit
from voxledger.tasks.metrics.normalise import normaliser_for
from voxledger.tasks.metrics.textmetrics import score_text


def ngrams(words: list[str], n: int) -> Counter[tuple[str, ...]]:
    """Multiset of the word n-grams of ``words`` (empty when fewer than ``n`` words)."""
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def repeated_ngram_excess(ref_words: list[str], hyp_words: list[str], n: int) -> int:
    """Hypothesis n-gram occurrences beyond max(reference count, 1), over repeated n-grams."""
    ref_counts = ngrams(ref_words, n)
    return sum(max(0, count - max(ref_counts[gram], 1)) for gram, count in ngrams(hyp_words, n).items() if count > 1)


def reference_overlap(ref_words: list[str], hyp_words: list[str]) -> float:
    """Fraction of reference words (multiset) found in the hypothesis; 1.0 for an empty ref."""
    if not ref_words:
        return 1.0
    hyp_counts = Counter(hyp_words)
    found = sum(min(c, hyp_counts[w]) for w, c in Counter(ref_words).items())
    return found / len(ref_words)


def instruction_fraction(instruction_words: list[str], ref_words: list[str], hyp_words: list[str], n: int) -> float:
    """Fraction of instruction n-grams in the hypothesis that the reference does not contain."""
    n = min(n, len(instruction_words))
    grams = ngrams(instruction_words, n)
    if not grams:
        return 0.0
    ref_grams, hyp_grams = ngrams(ref_words, n), ngrams(hyp_words, n)
    heard = sum(1 for gram in grams if gram in hyp_grams and gram not in ref_grams)
    return heard / len(grams)


def gate_unit(spec: ContentGateSpec, language: str | None) -> ContentUnit:
    """The unit the gate counts for a prompt in ``language`` (None: the plan's, or English)."""
    return content_unit(language or "en") if spec.unit == "by_language" else spec.unit


def units(normalised: str, unit: ContentUnit) -> list[str]:
    """Words (split on spaces) or characters (spaces left out) of a normalised text."""
    return normalised.split() if unit == "word" else [c for c in normalised if not c.isspace()]


def content_gate(
    ref_text: str,
    hyp_text: str,
    instruction: str | None = None,
    spec: ContentGateSpec | None = None,
    language: str | None = None,
) -> GateResult:
    """Run every content check of ``spec`` on one reference/transcript pair.

    Args:
        ref_text: the text the clip should say.
        hyp_text: the ASR transcript of the clip.
        instruction: the style/voice instruction given to the model, if any.
        spec: bounds, unit and the text normaliser; defaults to ``ContentGateSpec()``.
        language: the prompt's language (Whisper code), read when ``spec.unit`` is ``by_language``.

    Returns:
        GateResult with the text score and one GateCheck per check, in a fixed order.

    Raises:
        EvaluationError: the normaliser version in the spec is not the installed one.
    """
    spec = spec or ContentGateSpec()
    unit = gate_unit(spec, language)
    score = score_text(ref_text, hyp_text, spec.text_metric)
    ref_words, hyp_words = units(score.normalised_ref, unit), units(score.normalised_hyp, unit)
    excess = repeated_ngram_excess(ref_words, hyp_words, spec.ngram_n)
    overlap = reference_overlap(ref_words, hyp_words)
    checks = [
        _error_check(score, unit, spec),
        GateCheck(
            name="repeated_ngrams",
            value=float(excess),
            bound=float(spec.max_repeated_ngram_excess),
            passed=excess <= spec.max_repeated_ngram_excess,
            detail=f"extra repeats of {spec.ngram_n}-{'gram' if unit == 'word' else 'character gram'}s beyond the reference",
        ),
        GateCheck(
            name="reference_overlap",
            value=overlap,
            bound=spec.min_reference_overlap,
            passed=overlap >= spec.min_reference_overlap,
            detail=f"fraction of reference {'words' if unit == 'word' else 'characters'} present in the transcript",
        ),
        _instruction_check(instruction, ref_words, hyp_words, spec, unit),
    ]
    return GateResult(passed=all(c.passed for c in checks), checks=tuple(checks), text_score=score)


def _error_check(score: TextScore, unit: ContentUnit, spec: ContentGateSpec) -> GateCheck:
    """``wer`` over words, or ``cer`` over characters, against its bound."""
    name: GateCheckName
    if unit == "char":
        name, value, bound, edits, ref, what = "cer", score.cer, spec.max_cer, score.char_edits, score.ref_chars, "characters"
    else:
        name, value, bound, edits, ref, what = "wer", score.wer, spec.max_wer, score.word_edits, score.ref_words, "words"
    return GateCheck(name=name, value=value, bound=bound, passed=value <= bound, detail=f"{edits} edits over {ref} reference {what}")


def _instruction_check(
    instruction: str | None, ref_words: list[str], hyp_words: list[str], spec: ContentGateSpec, unit: ContentUnit
) -> GateCheck:
    bound = spec.max_instruction_ngram_fraction
    words = units(normaliser_for(spec.text_metric)(instruction or ""), unit)
    if not spec.check_spoken_instruction or not words:
        reason = "no instruction given" if spec.check_spoken_instruction else "disabled by spec"
        return GateCheck(
            name="spoken_instruction",
            value=None,
            bound=bound,
            passed=True,
            detail=f"skipped: {reason}",
        )
    fraction = instruction_fraction(words, ref_words, hyp_words, spec.ngram_n)
    return GateCheck(
        name="spoken_instruction",
        value=fraction,
        bound=bound,
        passed=fraction <= bound,
        detail=f"fraction of instruction {min(spec.ngram_n, len(words))}-{'gram' if unit == 'word' else 'character gram'}s heard, not in text",
    )
