"""WER and CER with jiwer 4 after a registered normaliser: per utterance and corpus micro/macro.

One compute path: both texts go through the spec's normaliser, then jiwer aligns words (split on
whitespace) and characters (every character, spaces included). Rates:

- CER counts spaces unless the spec says ``cer_spaces: ignored`` (the Chinese normalisers).
- utterance: edits / reference units; an empty normalised reference gives 0.0 when the
  hypothesis is empty too and 1.0 otherwise (jiwer alone returns the raw insertion count).
- micro: summed edits / summed reference units over the corpus (empty references add their
  insertions to the numerator and nothing to the denominator; all-empty -> the rule above).
- macro: plain mean of utterance rates.
"""

from __future__ import annotations

from collections.abc import Sequence

import jiwer

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import CorpusTextScore, TextMetricSpec, TextScore
from voxledger.tasks.metrics import verify_engine
from voxledger.tasks.metrics.normalise import normaliser_for

_SPACES = jiwer.Compose([jiwer.RemoveMultipleSpaces(), jiwer.Strip()])


def _rate(edits: int, ref_units: int) -> float:
    """Edits per reference unit, with the documented rule for an empty reference."""
    if ref_units == 0:
        return 0.0 if edits == 0 else 1.0
    return edits / ref_units


def score_text(ref: str, hyp: str, spec: TextMetricSpec | None = None) -> TextScore:
    """Score one hypothesis against its reference.

    Args:
        ref: the text that should have been spoken.
        hyp: the ASR transcript.
        spec: normaliser and conventions; defaults to ``TextMetricSpec()`` (whisper_en).

    Returns:
        TextScore with WER, CER, word edit counts, character edits and the normalised texts.

    Raises:
        EvaluationError: ``ref``/``hyp`` is not a string, or the spec's jiwer or normaliser
            version is not the installed one.
    """
    spec = spec or TextMetricSpec()
    for label, value in (("ref", ref), ("hyp", hyp)):
        if not isinstance(value, str):
            raise EvaluationError(f"{label} must be str, got {type(value).__name__}: {value!r}")
    verify_engine(spec.engine)
    normalise = normaliser_for(spec)
    ref_n, hyp_n = _SPACES(normalise(ref)), _SPACES(normalise(hyp))
    words = jiwer.process_words(ref_n, hyp_n)
    if spec.cer_spaces == "ignored":
        chars = jiwer.process_characters(ref_n.replace(" ", ""), hyp_n.replace(" ", ""))
    else:
        chars = jiwer.process_characters(ref_n, hyp_n)
    ref_words = words.hits + words.substitutions + words.deletions
    ref_chars = chars.hits + chars.substitutions + chars.deletions
    word_edits = words.substitutions + words.deletions + words.insertions
    char_edits = chars.substitutions + chars.deletions + chars.insertions
    return TextScore(
        wer=_rate(word_edits, ref_words),
        cer=_rate(char_edits, ref_chars),
        hits=words.hits,
        substitutions=words.substitutions,
        deletions=words.deletions,
        insertions=words.insertions,
        ref_words=ref_words,
        char_edits=char_edits,
        ref_chars=ref_chars,
        normalised_ref=ref_n,
        normalised_hyp=hyp_n,
    )


def aggregate(scores: Sequence[TextScore]) -> CorpusTextScore:
    """Corpus micro and macro WER/CER of already-scored utterances (same spec for all).

    Raises:
        EvaluationError: ``scores`` is empty (a corpus rate of nothing is not 0).
    """
    if not scores:
        raise EvaluationError("cannot aggregate zero utterances: pass at least one TextScore")
    word_edits = sum(s.word_edits for s in scores)
    ref_words = sum(s.ref_words for s in scores)
    char_edits = sum(s.char_edits for s in scores)
    ref_chars = sum(s.ref_chars for s in scores)
    return CorpusTextScore(
        utterances=len(scores),
        empty_references=sum(1 for s in scores if s.ref_words == 0),
        wer_micro=_rate(word_edits, ref_words),
        wer_macro=sum(s.wer for s in scores) / len(scores),
        cer_micro=_rate(char_edits, ref_chars),
        cer_macro=sum(s.cer for s in scores) / len(scores),
        word_edits=word_edits,
        ref_words=ref_words,
        char_edits=char_edits,
        ref_chars=ref_chars,
    )


def score_corpus(refs: Sequence[str], hyps: Sequence[str], spec: TextMetricSpec | None = None) -> tuple[list[TextScore], CorpusTextScore]:
    """Score aligned reference/hypothesis lists; return per-utterance scores and the aggregate.

    Raises:
        EvaluationError: the lists differ in length or are empty.
    """
    if len(refs) != len(hyps):
        raise EvaluationError(f"{len(refs)} references but {len(hyps)} hypotheses: pass one hypothesis per reference")
    scores = [score_text(r, h, spec) for r, h in zip(refs, hyps, strict=True)]
    return scores, aggregate(scores)
